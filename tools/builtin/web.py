"""Extension point for web search and fetch: bring your own provider, get model-ready tools.

Swarm ships no web client (the runtime must work offline). To give agents the web, implement one
or both protocols and wrap them::

    class MySearch:
        async def search(self, query: str, k: int) -> list[WebResult]:
            data = await my_api.search(query, count=k)           # your HTTP client, your API key
            return [WebResult(url=r["url"], title=r["title"], snippet=r["snippet"]) for r in data]

    registry.add(web_toolset(search=MySearch(), fetch=MyFetcher()))

The wrappers validate arguments, refuse non-http(s) URLs, cut long pages, and turn provider errors
into tool errors the model can recover from. A plain ``async def``/``def`` with the same signature
works too (see :class:`FunctionSearch`/:class:`FunctionFetch`).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict

from agent_swarm.swarm.errors import ConfigError, ToolError
from agent_swarm.tools.registry import Tool, Toolset

__all__ = [
    "FetchedPage",
    "FunctionFetch",
    "FunctionSearch",
    "WebFetcher",
    "WebResult",
    "WebSearchProvider",
    "web_fetch_tool",
    "web_search_tool",
    "web_toolset",
]


class WebResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str
    title: str = ""
    snippet: str = ""


class FetchedPage(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str
    text: str
    title: str = ""
    status: int = 200


@runtime_checkable
class WebSearchProvider(Protocol):
    async def search(self, query: str, k: int) -> list[WebResult]: ...


@runtime_checkable
class WebFetcher(Protocol):
    async def fetch(self, url: str) -> FetchedPage: ...


class FunctionSearch:
    """Adapt ``fn(query, k) -> list[WebResult]`` (sync or async) to :class:`WebSearchProvider`."""

    def __init__(self, fn: Callable[[str, int], list[WebResult] | Awaitable[list[WebResult]]]) -> None:
        self.fn = fn

    async def search(self, query: str, k: int) -> list[WebResult]:
        out = self.fn(query, k)
        return await out if inspect.isawaitable(out) else out


class FunctionFetch:
    """Adapt ``fn(url) -> FetchedPage`` (sync or async) to :class:`WebFetcher`."""

    def __init__(self, fn: Callable[[str], FetchedPage | Awaitable[FetchedPage]]) -> None:
        self.fn = fn

    async def fetch(self, url: str) -> FetchedPage:
        out = self.fn(url)
        return await out if inspect.isawaitable(out) else out


def web_search_tool(
    provider: WebSearchProvider, *, name: str = "web_search", max_k: int = 10, timeout_s: float = 30
) -> Tool:
    """A ``web_search(query, k)`` tool backed by ``provider``."""
    if not isinstance(provider, WebSearchProvider):
        raise ConfigError(f"{provider!r} has no async search(query, k) method; wrap a function in FunctionSearch")

    async def web_search(query: str, k: int = 5) -> str:
        """Search the web; returns titles, URLs and snippets of the best results.

        Args:
            query: what to search for.
            k: how many results to return.
        """
        if not query.strip():
            raise ToolError("query is empty; say what to search for")
        if not 1 <= k <= max_k:
            raise ToolError(f"k={k} is out of range; use 1..{max_k}")
        try:
            results = await provider.search(query, k)
        except ToolError:
            raise
        except Exception as exc:
            raise ToolError(f"web search failed ({type(exc).__name__}: {exc}); retry or rephrase") from None
        if not results:
            return f"no web results for {query!r}"
        return "\n".join(f"[{i}] {r.title}\n    {r.url}\n    {r.snippet}" for i, r in enumerate(results[:k], 1))

    return Tool(web_search, name=name, timeout_s=timeout_s)


def web_fetch_tool(
    fetcher: WebFetcher, *, name: str = "web_fetch", max_chars: int = 12_000, timeout_s: float = 30
) -> Tool:
    """A ``web_fetch(url)`` tool backed by ``fetcher``; only http(s) URLs reach it."""
    if not isinstance(fetcher, WebFetcher):
        raise ConfigError(f"{fetcher!r} has no async fetch(url) method; wrap a function in FunctionFetch")

    async def web_fetch(url: str, offset: int = 0) -> str:
        """Fetch a web page and return its text.

        Args:
            url: an http:// or https:// URL.
            offset: character offset to continue reading a long page.
        """
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ToolError(f"{url!r} is not an http(s) URL")
        try:
            page = await fetcher.fetch(url)
        except ToolError:
            raise
        except Exception as exc:
            raise ToolError(f"fetching {url} failed ({type(exc).__name__}: {exc})") from None
        if page.status >= 400:
            raise ToolError(f"fetching {url} returned HTTP {page.status}")
        body = page.text[max(0, offset) : max(0, offset) + max_chars]
        rest = len(page.text) - max(0, offset) - len(body)
        more = f"\n…[{rest} more characters; call {name} with offset={offset + len(body)}]" if rest > 0 else ""
        return f"{page.title}\n{page.url}\n\n{body}{more}".lstrip()

    return Tool(web_fetch, name=name, timeout_s=timeout_s)


def web_toolset(
    *, search: WebSearchProvider | None = None, fetch: WebFetcher | None = None, name: str = "web"
) -> Toolset:
    """A ``web`` toolset with whichever of ``web_search``/``web_fetch`` you provide."""
    tools: list[Tool] = []
    if search is not None:
        tools.append(web_search_tool(search))
    if fetch is not None:
        tools.append(web_fetch_tool(fetch))
    if not tools:
        raise ConfigError("web_toolset needs a search provider, a fetcher, or both")
    return Toolset(name, tuple(tools))
