"""No library function over 60 lines (issue 27): one that grows past it is split where it does two things.

Measured as the ``ast`` sees a function: from its ``def`` line to its last line, signature and docstring
included, nested functions counted on their own as well as inside their parent.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ("swarm", "orchestrator", "subagents", "tools", "traces", "workloads")
LIMIT = 60

TOOL_TABLES = {
    # A τ² domain's tools as closures over one episode's database: a table of tool definitions (each
    # tool is a function of its own, under the limit), not one function doing many things.
    "workloads/tau2_airline.py:airline_tools",
    "workloads/tau2_retail.py:retail_tools",
}


def _long_functions(path: Path) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function in ``path`` over :data:`LIMIT` lines."""
    found: list[tuple[str, int]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                assert child.end_lineno is not None
                lines = child.end_lineno - child.lineno + 1
                if lines > LIMIT:
                    found.append((prefix + child.name, lines))
                walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    walk(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def test_no_library_function_is_over_60_lines() -> None:
    long = [
        f"{rel}:{name} ({lines} lines)"
        for package in LIBRARY
        for path in sorted((ROOT / package).rglob("*.py"))
        for rel in [path.relative_to(ROOT).as_posix()]
        for name, lines in _long_functions(path)
        if f"{rel}:{name}" not in TOOL_TABLES
    ]
    assert not long, long


def test_the_measure_sees_methods_and_nested_functions(tmp_path: Path) -> None:
    def body(indent: str, lines: int) -> str:
        return "".join(f"{indent}x{i} = {i}\n" for i in range(lines))

    source = (
        f"class C:\n    def m(self):\n{body(' ' * 8, LIMIT)}\n"  # m: 61 lines
        f"def f():\n    def g():\n{body(' ' * 8, LIMIT)}\n"  # g: 61 lines, f: 62
        f"def short():\n{body(' ' * 4, LIMIT - 1)}"  # 60 lines: at the limit, not over it
    )
    path = tmp_path / "m.py"
    path.write_text(source, encoding="utf-8")
    assert _long_functions(path) == [("C.m", 61), ("f", 62), ("f.g", 61)]
