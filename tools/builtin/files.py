"""Workspace file tools: list, read, write and search files under the episode workspace only.

Every path is relative to the workspace. The sandboxed code can change the workspace while a tool runs
(sub-agents share it and run at once), so nothing is checked by name and then opened by name: every
path is opened one component at a time relative to a directory descriptor, with ``O_NOFOLLOW`` (a
symbolic link anywhere in the path is refused, never followed) and ``O_NONBLOCK`` (a FIFO cannot hang
the call); what was opened is checked through its descriptor — only directories and regular files with
a single link (a hard link could name a file outside) are used, and a file is truncated only after that
check. Absolute paths, ``~``, NUL bytes and ``..`` that climbs out are refused with a
:class:`~agent_swarm.swarm.errors.ToolError` the model can read. When we run as root, what the tools create belongs
to the workspace's owner (the sandbox's uid), so the sandboxed code can keep editing it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from agent_swarm.swarm.errors import ToolError
from agent_swarm.tools.registry import Tool, ToolContext, Toolset

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
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_FILE_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
_LINK_HINT = "the file tools never follow symbolic links (they could lead outside the workspace)"


def _parts(path: str) -> list[str]:
    """The components of a model-supplied relative path, ``..`` applied lexically; raises ToolError."""
    if "\x00" in path:
        raise ToolError("path contains a NUL byte; use a plain relative path")
    if path.startswith("~") or PurePosixPath(path).is_absolute() or re.match(r"^[A-Za-z]:[\\/]", path):
        raise ToolError(f"path {path!r} is absolute; use a path relative to the workspace, e.g. 'notes.txt'")
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise ToolError(f"path {path!r} leads outside the workspace; stay inside it (no '..' out)")
            parts.pop()
        else:
            parts.append(part)
    return parts


def resolve_in_workspace(workspace: Path, path: str) -> Path:
    """The lexical location of a model-supplied relative ``path`` in ``workspace`` (or ToolError).

    Only a name: it is not safe to open by name (a component may be or become a symlink). The tools
    open paths through :class:`_Workspace`, never through this.
    """
    return workspace.resolve().joinpath(*_parts(path))


class _Workspace:
    """The workspace root held open as a descriptor; every open goes through it."""

    def __init__(self, root: Path) -> None:
        self.fd = os.open(root, _DIR_FLAGS)
        st = os.fstat(self.fd)
        # As root, new entries go to the workspace's owner (the sandbox's uid), not to root.
        self.owner = (st.st_uid, st.st_gid) if os.geteuid() == 0 and st.st_uid != 0 else None

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> _Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open_dir(self, parts: list[str], path: str, *, create: bool = False) -> int:
        """A descriptor for the directory ``parts`` (created when ``create``). Caller closes it."""
        fd = os.dup(self.fd)
        try:
            for i, name in enumerate(parts):
                try:
                    nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise ToolError(f"{path!r} does not exist in the workspace; call list_files") from None
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o755, dir_fd=fd)
                    nxt = self._open_new_dir(fd, name, path)
                except OSError as exc:
                    if exc.errno == errno.ENOTDIR and i == len(parts) - 1 and not create and not _is_link(fd, name):
                        raise ToolError(f"{path!r} is a file, not a directory; use read_file") from None
                    raise self._refusal(exc, path, _is_link(fd, name)) from None
                os.close(fd)
                fd = nxt
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _open_new_dir(self, parent: int, name: str, path: str) -> int:
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except OSError as exc:
            raise self._refusal(exc, path, _is_link(parent, name)) from None
        if self.owner is not None and os.fstat(fd).st_uid == 0:
            os.fchown(fd, *self.owner)
        return fd

    def open_file(self, parts: list[str], path: str, *, write: bool = False) -> int:
        """A descriptor for the regular, single-link file ``parts`` (created for writing). For
        writing it is neither truncated nor appended to yet: the caller does that after the checks."""
        if not parts:
            raise ToolError(f"{path!r} is the workspace directory; give a file name")
        parent = self.open_dir(parts[:-1], path, create=write)
        try:
            return self.open_in(parent, parts[-1], path, write=write)
        finally:
            os.close(parent)

    def open_in(self, parent: int, name: str, path: str, *, write: bool = False) -> int:
        flags = _FILE_FLAGS | (os.O_RDWR | os.O_CREAT if write else os.O_RDONLY)
        try:
            fd = os.open(name, flags, 0o644, dir_fd=parent)
        except FileNotFoundError:
            raise ToolError(f"{path!r} is not a file in the workspace; call list_files to see what exists") from None
        except OSError as exc:
            raise self._refusal(exc, path, _is_link(parent, name)) from None
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise ToolError(f"{path!r} is a directory; give a file name")
            if not stat.S_ISREG(st.st_mode):
                raise ToolError(f"{path!r} is not a regular file (a FIFO, socket or device); the file tools refuse it")
            if st.st_nlink != 1:
                raise ToolError(
                    f"{path!r} has {st.st_nlink} hard links; the file tools refuse hard-linked files "
                    "(another name could be outside the workspace)"
                )
            os.set_blocking(fd, True)
            if write and self.owner is not None and st.st_uid == 0:
                os.fchown(fd, *self.owner)
            return fd
        except BaseException:
            os.close(fd)
            raise

    @staticmethod
    def _refusal(exc: OSError, path: str, link: bool = False) -> ToolError:
        if link or exc.errno in (errno.ELOOP, errno.EMLINK):
            return ToolError(f"path {path!r} goes through a symbolic link: {_LINK_HINT}")
        if exc.errno == errno.ENOTDIR:
            return ToolError(f"path {path!r} goes through something that is not a directory ({_LINK_HINT})")
        if exc.errno == errno.EISDIR:
            return ToolError(f"{path!r} is a directory; give a file name")
        return ToolError(f"cannot open {path!r}: {exc.strerror}")

    def walk(
        self, parts: list[str], path: str, *, recursive: bool = True
    ) -> Iterator[tuple[str, os.DirEntry[str], int]]:
        """(relative path, entry, the descriptor of its directory) for everything below ``parts``,
        depth first in name order; directories are entered by descriptor, symlinks never followed."""
        top = self.open_dir(parts, path)
        prefix = "/".join(parts)
        stack = [(top, prefix)]
        try:
            while stack:
                fd, rel = stack.pop()
                try:
                    with os.scandir(fd) as it:
                        entries = sorted(it, key=lambda e: e.name)
                    subdirs = []
                    for entry in entries:
                        name = f"{rel}/{entry.name}" if rel else entry.name
                        yield name, entry, fd
                        if recursive and entry.is_dir(follow_symlinks=False):
                            with contextlib.suppress(OSError):
                                subdirs.append((os.open(entry.name, _DIR_FLAGS, dir_fd=fd), name))
                    stack.extend(reversed(subdirs))
                finally:
                    os.close(fd)
        finally:
            for fd, _ in stack:
                os.close(fd)


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _ws(ctx: ToolContext) -> _Workspace:
    return _Workspace(ctx.workspace_path())


def _read_bytes(fd: int, limit: int, path: str) -> bytes:
    size = os.fstat(fd).st_size
    if size > limit:
        raise ToolError(f"{path!r} is larger than {limit} bytes; read it with the python tool")
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
        if sum(map(len, chunks)) > limit:  # grew while we read
            raise ToolError(f"{path!r} is larger than {limit} bytes; read it with the python tool")
    return b"".join(chunks)


def list_files(ctx: ToolContext, path: str = ".", recursive: bool = True) -> str:
    """List files and directories in the workspace.

    Args:
        path: directory relative to the workspace (default: the workspace itself).
        recursive: also list everything below subdirectories.
    """
    parts = _parts(path)
    entries: list[str] = []
    with _ws(ctx) as ws:
        for rel, entry, _fd in ws.walk(parts, path, recursive=recursive):
            if len(entries) >= _MAX_LIST:
                entries.append(f"…(more than {_MAX_LIST} entries; list a subdirectory)")
                break
            if entry.is_symlink():
                entries.append(f"{rel} -> (symlink)")
            elif entry.is_dir(follow_symlinks=False):
                entries.append(rel + "/")
            else:
                with contextlib.suppress(OSError):
                    entries.append(f"{rel}  ({entry.stat(follow_symlinks=False).st_size} bytes)")
    return "\n".join(entries) if entries else "(empty)"


def read_file(ctx: ToolContext, path: str, offset: int = 0, max_chars: int = 12_000) -> str:
    """Read a text file from the workspace.

    Args:
        path: file path relative to the workspace.
        offset: character offset to start from (for reading long files in pieces).
        max_chars: how many characters to return at most.
    """
    with _ws(ctx) as ws:
        fd = ws.open_file(_parts(path), path)
        try:
            text = _read_bytes(fd, MAX_FILE_BYTES, path).decode("utf-8", errors="replace")
        finally:
            os.close(fd)
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
    data = content.encode("utf-8")
    if len(data) > MAX_FILE_BYTES:
        raise ToolError(f"content is larger than {MAX_FILE_BYTES} bytes; write it in parts with append=true")
    parts = _parts(path)
    with _ws(ctx) as ws:
        fd = ws.open_file(parts, path, write=True)
        try:
            if append:
                os.lseek(fd, 0, os.SEEK_END)
            else:
                os.ftruncate(fd, 0)  # only now: the checks passed on this very file
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except OSError as exc:
            raise ToolError(f"cannot write {path!r}: {exc.strerror}") from None
        finally:
            os.close(fd)
    return f"{'appended' if append else 'wrote'} {len(content)} characters to {'/'.join(parts)}"


def search_files(ctx: ToolContext, pattern: str, path: str = ".", regex: bool = False) -> str:
    """Find lines matching a text pattern in workspace files (like grep -n).

    Args:
        pattern: text to look for (case-insensitive), or a regular expression when regex is true.
        path: file or directory relative to the workspace to search in.
        regex: treat pattern as a Python regular expression.
    """
    try:
        rx = re.compile(pattern if regex else re.escape(pattern), re.IGNORECASE)
    except re.error as exc:
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from None
    parts = _parts(path)
    out: list[str] = []

    def scan(rel: str, fd: int) -> bool:
        try:
            text = _read_bytes(fd, MAX_FILE_BYTES, rel).decode("utf-8")
        except (ToolError, UnicodeDecodeError, OSError):
            return False  # too large, or binary: not a text match
        finally:
            os.close(fd)
        for no, line in enumerate(text.splitlines(), 1):
            if rx.search(line):
                out.append(f"{rel}:{no}: {line[:300]}")
                if len(out) >= _MAX_MATCHES:
                    out.append(f"…(stopped at {_MAX_MATCHES} matches; narrow the pattern or path)")
                    return True
        return False

    with _ws(ctx) as ws:
        try:
            single = ws.open_file(parts, path) if parts else None
        except ToolError as exc:
            if "is a directory" not in str(exc):
                raise
            single = None
        if single is not None:
            scan("/".join(parts), single)
        else:
            for rel, entry, dfd in ws.walk(parts, path):
                if entry.is_symlink() or not entry.is_file(follow_symlinks=False):
                    continue
                try:
                    fd = ws.open_in(dfd, entry.name, rel)
                except ToolError:
                    continue  # changed under us, hard-linked, not regular: skipped, never followed
                if scan(rel, fd):
                    break
    return "\n".join(out) if out else f"no matches for {pattern!r}"


def files_toolset(name: str = "files") -> Toolset:
    """The four workspace file tools as one toolset."""
    return Toolset(name, tuple(Tool(fn) for fn in (list_files, read_file, write_file, search_files)))
