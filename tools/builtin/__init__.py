"""Built-in tools: sandboxed ``python``, workspace files, offline search, and the web extension point.

Offline search needs the ``search`` extra (``bm25s``); it is imported when an index is built.
"""

from agent_swarm.tools.builtin.files import (
    files_toolset,
    list_files,
    read_file,
    resolve_in_workspace,
    search_files,
    write_file,
)
from agent_swarm.tools.builtin.python import format_result, python_tool
from agent_swarm.tools.builtin.search import Corpus, Document, SearchHit, SearchIndex, search_toolset
from agent_swarm.tools.builtin.web import (
    FetchedPage,
    FunctionFetch,
    FunctionSearch,
    WebFetcher,
    WebResult,
    WebSearchProvider,
    web_fetch_tool,
    web_search_tool,
    web_toolset,
)

__all__ = [
    "Corpus",
    "Document",
    "FetchedPage",
    "FunctionFetch",
    "FunctionSearch",
    "SearchHit",
    "SearchIndex",
    "WebFetcher",
    "WebResult",
    "WebSearchProvider",
    "files_toolset",
    "format_result",
    "list_files",
    "python_tool",
    "read_file",
    "resolve_in_workspace",
    "search_files",
    "search_toolset",
    "web_fetch_tool",
    "web_search_tool",
    "web_toolset",
    "write_file",
]
