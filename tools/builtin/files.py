"""Workspace file tools: list, read, write and search files under the episode workspace only.

Every path is relative to the workspace. Absolute paths, ``..`` that leaves the workspace and
symlinks that resolve outside it are refused with a :class:`~swarm.errors.ToolError` the model can
read; nothing outside the workspace is ever read or written.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

from swarm.errors import ToolError
from tools.registry import Tool, ToolContext, Toolset

__all__ = [
    "MAX_FILE_BYTES",
    "files_toolset",
    "list_files",
    "read_file",
    "resolve_in_workspace",
    "search_files",
    "write_file",
]

MAX_FILE_BYTES = 2_000_000
_MAX_LIST = 500
_MAX_MATCHES = 200


def resolve_in_workspace(workspace: Path, path: str) -> Path:
    """Map a model-supplied relative ``path`` to a real path inside ``workspace`` or raise ToolError.

    Refuses absolute paths, ``~``, NUL bytes, ``..`` that climbs out, and any path whose real
    location (after following symlinks, including dangling ones) is outside the workspace.
    """
    if "\x00" in path:
        raise ToolError("path contains a NUL byte; use a plain relative path")
    if path.startswith("~") or PurePosixPath(path).is_absolute() or re.match(r"^[A-Za-z]:[\\/]", path):
        raise ToolError(f"path {path!r} is absolute; use a path relative to the workspace, e.g. 'notes.txt'")
    root = workspace.resolve()
    candidate = root / path
    real = Path(os.path.realpath(candidate))
    if real != root and root not in real.parents:
        raise ToolError(f"path {path!r} leads outside the workspace; stay inside it (no '..', no symlinks out)")
    return real


def _ws(ctx: ToolContext) -> Path:
    return ctx.workspace_path()


def _rel(root: Path, p: Path) -> str:
    return p.relative_to(root).as_posix() or "."


def list_files(ctx: ToolContext, path: str = ".", recursive: bool = True) -> str:
    """List files and directories in the workspace.

    Args:
        path: directory relative to the workspace (default: the workspace itself).
        recursive: also list everything below subdirectories.
    """
    root = _ws(ctx).resolve()
    target = resolve_in_workspace(root, path)
    if not target.exists():
        raise ToolError(f"{path!r} does not exist in the workspace")
    if not target.is_dir():
        raise ToolError(f"{path!r} is a file, not a directory; use read_file")
    entries: list[str] = []
    walker = sorted(target.rglob("*")) if recursive else sorted(target.iterdir())
    for p in walker:
        if len(entries) >= _MAX_LIST:
            entries.append(f"…(more than {_MAX_LIST} entries; list a subdirectory)")
            break
        if p.is_symlink():
            entries.append(f"{_rel(root, p)} -> (symlink)")
        elif p.is_dir():
            entries.append(_rel(root, p) + "/")
        else:
            entries.append(f"{_rel(root, p)}  ({p.stat().st_size} bytes)")
    return "\n".join(entries) if entries else "(empty)"


def read_file(ctx: ToolContext, path: str, offset: int = 0, max_chars: int = 12_000) -> str:
    """Read a text file from the workspace.

    Args:
        path: file path relative to the workspace.
        offset: character offset to start from (for reading long files in pieces).
        max_chars: how many characters to return at most.
    """
    target = resolve_in_workspace(_ws(ctx), path)
    if not target.is_file():
        raise ToolError(f"{path!r} is not a file in the workspace; call list_files to see what exists")
    if target.stat().st_size > MAX_FILE_BYTES:
        raise ToolError(f"{path!r} is larger than {MAX_FILE_BYTES} bytes; read it with the python tool")
    text = target.read_text(encoding="utf-8", errors="replace")
    offset = max(0, offset)
    chunk = text[offset : offset + max(1, max_chars)]
    rest = len(text) - offset - len(chunk)
    if rest > 0:
        chunk += f"\n…[{rest} more characters; call read_file with offset={offset + len(chunk)}]"
    return chunk


def write_file(ctx: ToolContext, path: str, content: str, append: bool = False) -> str:
    """Write (or append to) a text file in the workspace, creating parent directories.

    Args:
        path: file path relative to the workspace.
        content: the text to write.
        append: add to the end of the file instead of replacing it.
    """
    root = _ws(ctx)
    target = resolve_in_workspace(root, path)
    if target == root.resolve() or target.is_dir():
        raise ToolError(f"{path!r} is a directory; give a file name")
    if len(content.encode("utf-8")) > MAX_FILE_BYTES:
        raise ToolError(f"content is larger than {MAX_FILE_BYTES} bytes; write it in parts with append=true")
    target.parent.mkdir(parents=True, exist_ok=True)
    # Re-check after mkdir (a racing symlink swap), then refuse to follow a final symlink.
    resolve_in_workspace(root, path)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC) | os.O_NOFOLLOW
    try:
        fd = os.open(target, flags, 0o644)
    except OSError as exc:
        raise ToolError(f"cannot write {path!r}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(content)
    return f"{'appended' if append else 'wrote'} {len(content)} characters to {_rel(root.resolve(), target)}"


def search_files(ctx: ToolContext, pattern: str, path: str = ".", regex: bool = False) -> str:
    """Find lines matching a text pattern in workspace files (like grep -n).

    Args:
        pattern: text to look for (case-insensitive), or a regular expression when regex is true.
        path: file or directory relative to the workspace to search in.
        regex: treat pattern as a Python regular expression.
    """
    root = _ws(ctx).resolve()
    target = resolve_in_workspace(root, path)
    try:
        rx = re.compile(pattern if regex else re.escape(pattern), re.IGNORECASE)
    except re.error as exc:
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from None
    files = [target] if target.is_file() else sorted(p for p in target.rglob("*") if p.is_file())
    out: list[str] = []
    for f in files:
        if f.is_symlink() or f.stat().st_size > MAX_FILE_BYTES:
            continue
        try:
            text = f.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary or unreadable: not a text match
        for no, line in enumerate(text.splitlines(), 1):
            if rx.search(line):
                out.append(f"{_rel(root, f)}:{no}: {line[:300]}")
                if len(out) >= _MAX_MATCHES:
                    out.append(f"…(stopped at {_MAX_MATCHES} matches; narrow the pattern or path)")
                    return "\n".join(out)
    return "\n".join(out) if out else f"no matches for {pattern!r}"


def files_toolset(name: str = "files") -> Toolset:
    """The four workspace file tools as one toolset."""
    return Toolset(name, tuple(Tool(fn) for fn in (list_files, read_file, write_file, search_files)))
