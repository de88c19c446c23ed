"""``swarm run``, ``eval``, ``rollout`` and ``train`` stay parse → settings → library call: each command
function, signature and docstring included, is under 60 lines (the options are fields of the command's
options model, :mod:`agent_swarm.orchestrator.cli.settings`), and so are the helpers that run them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agent_swarm.orchestrator import cli

CLI = Path(cli.__file__).parent
COMMANDS = [
    ("run.py", "run"),
    ("eval.py", "eval_command"),
    ("rollout.py", "rollout"),
    ("train.py", "train"),
    ("serve.py", "serve"),
]
HELPERS = [("eval.py", "_execute"), ("rollout.py", "_collect"), ("../eval.py", "run_eval")]
MAX_LINES = 60


def _lines(path: Path, name: str) -> int:
    """The function's lines, from its first decorator to its last line."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name)
    assert fn.end_lineno is not None
    return fn.end_lineno - min([fn.lineno, *(d.lineno for d in fn.decorator_list)]) + 1


@pytest.mark.parametrize(("module", "name"), COMMANDS + HELPERS)
def test_command_function_is_under_60_lines(module: str, name: str) -> None:
    lines = _lines(CLI / module, name)
    assert lines < MAX_LINES, f"{module}:{name} has {lines} lines; move resolution or output into helpers"


@pytest.mark.parametrize(("module", "name"), COMMANDS[:3])
def test_each_model_command_declares_its_options_once_in_its_model(module: str, name: str) -> None:
    # parse -> settings -> library call: the typer function takes its options as one model
    tree = ast.parse((CLI / module).read_text(encoding="utf-8"))
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    assert fn.args.kwarg is not None and ast.unparse(fn.decorator_list[0]).startswith("command_options(")
