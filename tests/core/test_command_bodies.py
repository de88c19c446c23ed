"""``swarm run``, ``eval``, ``rollout`` and ``train`` stay parse → settings → library call: each command's
body (after its option declarations and docstring) is under 60 lines; the work lives in named helpers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import orchestrator.cli

CLI = Path(orchestrator.cli.__file__).parent
COMMANDS = [("run.py", "run"), ("eval.py", "eval_command"), ("rollout.py", "rollout"), ("train.py", "train")]
MAX_BODY_LINES = 60


def _body_lines(path: Path, name: str) -> int:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    body = fn.body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring is the command's help
    assert fn.end_lineno is not None
    return fn.end_lineno - body[0].lineno + 1


@pytest.mark.parametrize(("module", "name"), COMMANDS)
def test_command_body_is_under_60_lines(module: str, name: str) -> None:
    lines = _body_lines(CLI / module, name)
    assert lines < MAX_BODY_LINES, f"{module}:{name} has a {lines}-line body; move resolution or output into helpers"
