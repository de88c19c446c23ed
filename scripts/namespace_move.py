"""Rewrite imports and module-naming strings from the old top-level names to ``agent_swarm.*`` (issue 27.6).

The repository keeps its folders (``swarm/``, ``orchestrator/``, ...); ``agent_swarm/`` holds relative
symlinks to them, so the installed distribution has one top-level name. This script moves every import and
every string that names one of our modules (``"orchestrator.rl.scripted:make"``, ``python -m swarm.x``,
``importlib.import_module("tools.registry")``) to the new name. It is idempotent: after a rebase, take the
other side's version of a conflicting file and run it again.

    python scripts/namespace_move.py            # rewrite in place, print what changed
    python scripts/namespace_move.py --check    # exit 1 when something is left to rewrite

A dotted name is rewritten only where it is one of our modules (a ``.py`` file or a package folder in the
checkout), optionally followed by ``:attr`` or by a name the module defines at top level (``swarm.dag.Dag``):
``"swarm.dag.critical_steps"`` span attribute names (quoted alone), ``swarm.reward.*`` attribute families and
``[swarm.orchestrator_sampling]`` TOML tables stay as they are. Run ``ruff check --fix . && ruff format .``
after it (import order, long lines).
"""

from __future__ import annotations

import ast
import functools
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NEW = "agent_swarm"
OLD = ("swarm", "orchestrator", "subagents", "tools", "workloads")
# History and recorded data keep the names they were written with.
SKIP_PREFIXES = ("experiments/results/", "bench/results/", "traces/golden/", f"{NEW}/")
# ... and these name the old spellings on purpose (the migration note, the tests of the old spellings, the
# import hook whose error names the new path).
SKIP_FILES = {
    "CHANGELOG.md",
    "scripts/namespace_move.py",
    "docs/namespace.md",
    "tests/core/test_namespace.py",
    "_agent_swarm_moved.py",
}
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".sh", ".cfg", ".ini", ".txt"}
TEXT_FILES = {".ci/run"}  # scripts without a suffix

_OLD = "|".join(OLD)
# Import statements at the start of a line (also the continuation-free lines of `from x import (`).
FROM_RE = re.compile(rf"^(\s*)from ({_OLD})((?:\.\w+)*) import\b", re.M)
IMPORT_AS_RE = re.compile(rf"^(\s*)import ({_OLD})((?:\.\w+)*) as\b", re.M)
IMPORT_BARE_RE = re.compile(rf"^(\s*)import ({_OLD})\s*$", re.M)
IMPORT_DOTTED_RE = re.compile(rf"^\s*import ({_OLD})\.\w+", re.M)
# A dotted name inside a string, comment or text file; `(?<![\w./-])` keeps `agent_swarm.swarm`, attribute
# chains (`self.tools.x`) and paths (`a/swarm.x`) out; a trailing `.*` is a family of span attributes
# (`swarm.dag.*`) or a mutmut name pattern (derived from file paths), never an import.
DOTTED_RE = re.compile(rf"(?<![\w./-])((?:{_OLD})(?:\.[A-Za-z_]\w*)+)(:[A-Za-z_]\w*)?(?!\.\*|\.?\w)")
# `resources.files("workloads")`: the package's own data.
RESOURCES_RE = re.compile(rf"""(resources\.files\()(["'])({_OLD})\2""")


def is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


@functools.cache
def top_level_names(dotted: str) -> frozenset[str]:
    path = ROOT.joinpath(*dotted.split("."))
    path = path.with_suffix(".py") if path.with_suffix(".py").is_file() else path / "__init__.py"
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(names)


def names_object(m: re.Match[str], module: str, attr: str) -> bool:
    """``module.attr`` names one of the module's objects (``swarm.dag.Dag``, ``:func:`orchestrator.cli.main```),
    not a dotted key that starts like a module: ``"swarm.dag.critical_steps"`` quoted alone is a span attribute."""
    text, a, b = m.string, m.start(), m.end()
    quoted_alone = a > 0 and b < len(text) and text[a - 1] in "\"'" and text[b] == text[a - 1]
    return attr in top_level_names(module) and not quoted_alone


def rewrite_dotted(text: str) -> str:
    def sub(m: re.Match[str]) -> str:
        name, colon = m.group(1), m.group(2) or ""
        parts = name.split(".")
        # the longest prefix that is one of our modules
        for k in range(len(parts), 1, -1):
            if is_module(".".join(parts[:k])):
                rest = parts[k:]
                if rest and not colon and not names_object(m, ".".join(parts[:k]), rest[0]):
                    return m.group(0)
                return f"{NEW}.{name}{colon}"
        return m.group(0)

    return DOTTED_RE.sub(sub, text)


def rewrite_imports(text: str) -> str:
    text = FROM_RE.sub(lambda m: f"{m.group(1)}from {NEW}.{m.group(2)}{m.group(3)} import", text)
    text = IMPORT_AS_RE.sub(lambda m: f"{m.group(1)}import {NEW}.{m.group(2)}{m.group(3)} as", text)
    text = IMPORT_BARE_RE.sub(lambda m: f"{m.group(1)}from {NEW} import {m.group(2)}", text)
    return RESOURCES_RE.sub(lambda m: f"{m.group(1)}{m.group(2)}{NEW}.{m.group(3)}{m.group(2)}", text)


def rewrite_python(text: str) -> str:
    text = rewrite_imports(text)
    # strings and comments: module paths named in text (import_module, `python -m`, "module:attr", docs)
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    out, pos = [], 0
    for tok in tokens:
        if tok.type not in (tokenize.STRING, tokenize.COMMENT) and tok.type != getattr(tokenize, "FSTRING_MIDDLE", -1):
            continue
        start = offsets[tok.start[0] - 1] + tok.start[1]
        end = offsets[tok.end[0] - 1] + tok.end[1]
        seg = text[start:end]
        new = rewrite_imports(rewrite_dotted(seg)) if tok.type == tokenize.STRING else rewrite_dotted(seg)
        out.append(text[pos:start])
        out.append(new)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def wrap_long_lines(text: str, limit: int = 120) -> str:
    """Lines the new names pushed past ``limit`` inside a docstring or a comment line: split at the last
    space that fits, the rest on a new line with the same indent (``# `` kept for comments)."""
    in_doc: set[int] = set()  # line numbers (1-based) inside a triple-quoted string
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.STRING and tok.string.lstrip("rbuRBU").startswith(('"""', "'''")):
            in_doc.update(range(tok.start[0], tok.end[0] + 1))
    out = []
    for no, line in enumerate(text.splitlines(keepends=True), 1):
        body = line.rstrip("\n")
        stripped = body.lstrip()
        comment = stripped.startswith("#")
        while len(body) > limit and NEW in body and (comment or no in in_doc):
            indent = body[: len(body) - len(body.lstrip())]
            cut = body.rfind(" ", len(indent) + 2, limit + 1)
            if cut <= len(indent) + 2:
                break
            out.append(body[:cut] + "\n")
            body = indent + ("# " if comment else "") + body[cut + 1 :]
        out.append(body + line[len(line.rstrip("\n")) :])
    return "".join(out)


def rewrite_text(text: str) -> str:
    return rewrite_dotted(rewrite_imports(text))


def targets() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    out = []
    for rel in names.splitlines():
        if rel.startswith(SKIP_PREFIXES) or rel in SKIP_FILES:
            continue
        if Path(rel).suffix not in TEXT_SUFFIXES and rel not in TEXT_FILES:
            continue
        p = ROOT / rel
        if p.is_file() and not p.is_symlink():
            out.append(p)
    return out


def main(argv: list[str]) -> int:
    check = "--check" in argv
    changed, manual = [], []
    for p in targets():
        text = p.read_text(encoding="utf-8")
        new = rewrite_python(text) if p.suffix == ".py" else rewrite_text(text)
        if p.suffix == ".py":
            new = wrap_long_lines(new)
        rel = str(p.relative_to(ROOT))
        if p.suffix == ".py":
            manual += [f"{rel}: {m.group(0).strip()}" for m in IMPORT_DOTTED_RE.finditer(new)]
        if new != text:
            changed.append(rel)
            if not check:
                p.write_text(new, encoding="utf-8")
    for rel in changed:
        print(("would rewrite " if check else "rewrote ") + rel)
    for m in manual:
        print(f"by hand (`import x.y` binds the old top-level name): {m}", file=sys.stderr)
    return 1 if check and (changed or manual) else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
