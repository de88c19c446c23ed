"""Project conventions that a reviewer would otherwise have to remember, checked on the source tree.

* ``error_type`` values come from :class:`agent_swarm.swarm.errors.ErrorType`, never free strings: a typo in a
  free string ("WidthLimt") would silently split a failure class in every report and reward.
* Model mistakes (broken tool-call JSON, bad ``create_subagent`` arguments, unparseable judge output)
  raise the project's :class:`~agent_swarm.swarm.errors.AgentError` subclasses, which the runtime records as a
  step error, never a bare ``ValueError`` that a caller cannot tell from a bug.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.errors import AgentError, BackendUnavailableError, ErrorType, ModelOutputError, ToolError
from agent_swarm.swarm.records import EpisodeRecord

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("swarm", "tools", "subagents", "orchestrator", "workloads")
# Where a model's output is parsed or acted on: these raise AgentError subclasses for its mistakes.
MODEL_FACING = (
    "swarm/backends/toolparse.py",
    "swarm/backends/openai_http.py",
    "swarm/backends/local/backend.py",
    "swarm/verifiers/judge.py",
    "orchestrator/engine.py",
    "orchestrator/admission.py",
    "subagents/loop.py",
    "subagents/turns.py",
    "tools/registry.py",
)
_VALIDATORS = {"field_validator", "model_validator"}  # pydantic wants ValueError from these
_BUILTIN = {"ValueError", "TypeError", "KeyError", "RuntimeError", "Exception"}


def _library_files() -> Iterator[Path]:
    for pkg in PACKAGES:
        yield from sorted((ROOT / pkg).rglob("*.py"))


def _free_error_type_strings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    values = {e.value for e in ErrorType}
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skip.add(id(node.value))  # docstrings
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            skip.update(id(n) for n in ast.walk(node.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in values and id(node) not in skip:
            yield node.lineno, node.value


def test_error_types_are_enum_members_not_free_strings() -> None:
    found = [
        f"{p.relative_to(ROOT)}:{line}: {value!r} (use ErrorType.{ErrorType(value).name})"
        for p in _library_files()
        if p.name != "errors.py"
        for line, value in _free_error_type_strings(ast.parse(p.read_text()))
    ]
    assert not found, "free error_type strings:\n" + "\n".join(found)


def _bare_raises(tree: ast.AST) -> Iterator[tuple[int, str]]:
    def walk(node: ast.AST, in_validator: bool) -> Iterator[tuple[int, str]]:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names = {
                getattr(d.func if isinstance(d, ast.Call) else d, "id", None)
                or getattr(d.func if isinstance(d, ast.Call) else d, "attr", None)
                for d in node.decorator_list
            }
            in_validator = bool(names & _VALIDATORS)
        if isinstance(node, ast.Raise) and node.exc is not None and not in_validator:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id in _BUILTIN:
                yield node.lineno, exc.id
        for child in ast.iter_child_nodes(node):
            yield from walk(child, in_validator)

    yield from walk(tree, False)


@pytest.mark.parametrize("path", MODEL_FACING)
def test_model_mistakes_raise_agent_errors_not_bare_builtins(path: str) -> None:
    found = [f"{path}:{line}: raise {name}" for line, name in _bare_raises(ast.parse((ROOT / path).read_text()))]
    assert not found, "raise a agent_swarm.swarm.errors.AgentError subclass (ModelOutputError…) instead:\n" + "\n".join(
        found
    )


def test_the_scanners_see_what_they_forbid() -> None:
    bad = ast.parse('def f(r):\n    r.error_type = "WidthLimit"\n    raise ValueError("x")\n')
    assert list(_free_error_type_strings(bad)) == [(2, "WidthLimit")]
    assert list(_bare_raises(bad)) == [(3, "ValueError")]
    ok = ast.parse(
        '"""WidthLimit"""\n__all__ = ["ToolError"]\n@field_validator("x")\ndef v(c, x):\n    raise ValueError\n'
    )
    assert not list(_free_error_type_strings(ok)) and not list(_bare_raises(ok))


def test_error_type_values_are_the_strings_records_on_disk_hold() -> None:
    # The serialized values are a file format: renaming one would break every stored record.
    assert {e.name: e.value for e in ErrorType} == {
        "INVALID_ACTION": "InvalidAction",
        "AGENT_CALLED_AS_TOOL": "AgentCalledAsTool",
        "DUPLICATE_TASK": "DuplicateTask",
        "ALREADY_DONE": "AlreadyDone",
        "SPLIT_TASK": "SplitTask",
        "TOOL_WITHHELD": "ToolWithheld",
        "WIDTH_LIMIT": "WidthLimit",
        "BUDGET_EXHAUSTED": "BudgetExhausted",
        "UNKNOWN_TOOL": "UnknownTool",
        "ONE_CALL_PER_TURN": "OneCallPerTurn",
        "CANCELLED": "Cancelled",
        "HEDGED": "Hedged",
        "TIMEOUT": "TimeoutError",
        "ACTION_LOOP": "ActionLoopError",
        "PLACEMENT": "PlacementError",
        "AGENT": "AgentError",
        "BACKEND": "BackendError",
        "BACKEND_REFUSED": "BackendRefusedError",
        "BACKEND_TIMEOUT": "BackendTimeoutError",
        "BACKEND_UNAVAILABLE": "BackendUnavailableError",
        "MODEL_OUTPUT": "ModelOutputError",
        "TOOL": "ToolError",
        "TOOL_TIMEOUT": "ToolTimeoutError",
        "STEP_BUDGET": "BudgetExhaustedError",
        "CONTEXT_EXHAUSTED": "ContextExhausted",
        "TRAJECTORY": "TrajectoryError",
    }
    for e in ErrorType:  # the members named after our exceptions are those exceptions' names
        if e.value.endswith("Error") and e.value not in ("TimeoutError", "ActionLoopError", "PlacementError"):
            from agent_swarm.swarm import errors
            from agent_swarm.swarm.rl import trajectory

            cls = getattr(errors, e.value, None) or getattr(trajectory, e.value)
            assert cls.__name__ == e.value


def test_error_type_of_an_exception_and_a_record_round_trip() -> None:
    assert ErrorType.of(ModelOutputError("x")) is ErrorType.MODEL_OUTPUT
    assert ErrorType.of(ToolError("x")) is ErrorType.TOOL
    assert ErrorType.of(KeyError("k")) == "KeyError"  # a tool's own exception keeps its class name
    assert issubclass(ModelOutputError, AgentError)

    # error_type read back from JSON is a plain string (as in every record written before ErrorType): it
    # compares equal to the member, and a record holding the member writes the same bytes.
    old = EpisodeRecord.model_validate_json(_old_record_json())
    assert old.error_type == ErrorType.BACKEND and old.error_type is not None
    again = json.loads(old.model_dump_json())
    assert again["error_type"] == "BackendError"
    made = old.model_copy(update={"error_type": ErrorType.BACKEND})
    assert made.model_dump_json() == old.model_dump_json()


def _old_record_json() -> str:
    import anyio

    from agent_swarm.orchestrator import Orchestrator, SwarmConfig
    from agent_swarm.swarm.testing import FunctionBackend

    def down(_: ModelRequest) -> Completion:
        raise BackendUnavailableError("server down")

    record = anyio.run(lambda: Orchestrator(FunctionBackend(down), SwarmConfig()).run("task"))
    text = record.model_dump_json()
    assert '"error_type":"BackendError"' in text
    return text


def test_the_version_is_read_from_package_metadata_in_one_place() -> None:
    import importlib.metadata as md

    from agent_swarm import swarm

    assert swarm.__version__ == md.version("agent-swarm")
    setters = [
        str(p.relative_to(ROOT))
        for p in _library_files()
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
    ]
    assert setters == ["swarm/__init__.py", "swarm/__init__.py"]  # the metadata read and its fallback
    literal = [str(p.relative_to(ROOT)) for p in _library_files() if f'"{swarm.__version__}"' in p.read_text()]
    assert not literal, f"the version written out as a literal in {literal}"


def test_architecture_md_names_only_paths_and_registries_that_exist() -> None:
    """ARCHITECTURE.md is the newcomer's map: every path and registry it names must be in the tree."""
    import importlib
    import re

    text = (ROOT / "ARCHITECTURE.md").read_text()
    paths = {p for p in re.findall(r"`([\w./-]+/[\w./-]*)`", text) if not p.startswith(("http", "."))}
    assert {"swarm/rl/", "swarm/rl/losses.py", "orchestrator/backend_factory.py"} <= paths
    missing = sorted(p for p in paths if not (ROOT / p.split(" ")[0]).exists())
    assert not missing, f"ARCHITECTURE.md names paths that do not exist: {missing}"
    for module, name in [
        ("agent_swarm.swarm.verifiers", "VERIFIERS"),
        ("agent_swarm.workloads", "WORKLOADS"),
        ("agent_swarm.orchestrator.backend_factory", "BACKENDS"),
        ("agent_swarm.swarm.rl", "ADVANTAGES"),
        ("agent_swarm.swarm.rl", "SCHEDULES"),
        ("agent_swarm.swarm.errors", "ErrorType"),
    ]:
        assert f"`{name}`" in text and hasattr(importlib.import_module(module), name), name


def test_a_validation_error_becomes_one_line_naming_each_field() -> None:
    from pydantic import BaseModel, ValidationError

    from agent_swarm.swarm.errors import validation_problems

    class Inner(BaseModel):
        n: int

    class Outer(BaseModel):
        inner: Inner
        name: str

    with pytest.raises(ValidationError) as bad_fields:
        Outer.model_validate({"inner": {"n": "x"}})
    assert validation_problems(bad_fields.value, "outer", prefix="cfg.") == (
        "cfg.inner.n: Input should be a valid integer, unable to parse string as an integer; cfg.name: Field required"
    )
    with pytest.raises(ValidationError) as bad_whole:
        Outer.model_validate(3)
    assert (
        validation_problems(bad_whole.value, "outer")
        == "outer: Input should be a valid dictionary or instance of Outer"
    )


def test_both_loops_take_the_turn_primitives_from_their_neutral_home() -> None:
    """The orchestrator's loop never reaches into the sub-agent loop for what both share."""
    from agent_swarm.subagents import loop, turns

    shared = set(turns.__all__)
    assert {"call_model", "retry_malformed", "run_tool_calls", "call_signature", "repeat_notice"} <= shared
    assert all(getattr(turns, n).__module__ == "agent_swarm.subagents.turns" for n in shared)
    assert not shared & set(loop.__all__)
    reached = [
        f"{p.relative_to(ROOT)}: {alias.name}"
        for p in _library_files()
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module == "agent_swarm.subagents.loop"
        for alias in node.names
        if alias.name in shared
    ]
    assert not reached, f"turn primitives imported from agent_swarm.subagents.loop: {reached}"


# Packages cut along their seams (issue 27 item 5): each function stays under 60 lines, and a function that
# grows past it is split where it does two things.
SEAMED = ("orchestrator/rl", "orchestrator/rollout", "orchestrator/cluster")


@pytest.mark.parametrize("package", SEAMED)
def test_no_function_of_a_package_cut_along_its_seams_is_over_60_lines(package: str) -> None:
    long = [
        f"{p.name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for p in sorted((ROOT / package).glob("*.py"))
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > 60
    ]
    assert not long, long
