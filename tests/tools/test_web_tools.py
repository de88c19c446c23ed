"""The web search/fetch extension point wraps user providers into safe tools."""

from __future__ import annotations

import pytest

from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.messages import ToolCall
from agent_swarm.tools.builtin import FetchedPage, FunctionFetch, FunctionSearch, WebResult, web_toolset
from agent_swarm.tools.registry import ToolContext, ToolRegistry, execute_tool


class FakeSearch:
    def __init__(self) -> None:
        self.queries: list[tuple[str, int]] = []

    async def search(self, query: str, k: int) -> list[WebResult]:
        self.queries.append((query, k))
        return [WebResult(url=f"https://example.org/{i}", title=f"Result {i}", snippet=query) for i in range(k)]


async def test_user_provider_becomes_tools() -> None:
    provider = FakeSearch()
    pages = {"https://example.org/0": FetchedPage(url="https://example.org/0", title="Zero", text="x" * 50)}

    def fetch(url: str) -> FetchedPage:
        if url not in pages:
            raise LookupError(f"404 {url}")
        return pages[url]

    tools = ToolRegistry([web_toolset(search=provider, fetch=FunctionFetch(fetch))]).resolve(["web"])
    ctx = ToolContext()
    r = await execute_tool(ToolCall(id="1", name="web_search", arguments={"query": "swarm", "k": 2}), tools, ctx)
    assert provider.queries == [("swarm", 2)]
    assert "[2] Result 1\n    https://example.org/1" in r.content
    r = await execute_tool(ToolCall(id="2", name="web_fetch", arguments={"url": "https://example.org/0"}), tools, ctx)
    assert r.content.startswith("Zero\nhttps://example.org/0") and not r.is_error
    r = await execute_tool(ToolCall(id="3", name="web_fetch", arguments={"url": "file:///etc/passwd"}), tools, ctx)
    assert r.is_error and "not an http(s) URL" in r.content
    r = await execute_tool(ToolCall(id="4", name="web_fetch", arguments={"url": "https://nope.example"}), tools, ctx)
    assert r.is_error and "LookupError" in r.content


def test_bad_providers_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="search provider, a fetcher"):
        web_toolset()
    with pytest.raises(ConfigError, match="FunctionSearch"):
        web_toolset(search=object())  # type: ignore[arg-type]
    assert web_toolset(search=FunctionSearch(lambda q, k: [])).tools[0].name == "web_search"
