"""README's promises: it renders as CommonMark in the documented order, its demo output is what the
demo prints, its library example runs, and every `swarm` command and flag it shows exists."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import typer
from markdown_it import MarkdownIt
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
TOKENS = MarkdownIt("commonmark").parse(README)
LINES = README.splitlines()

SECTIONS = [
    "Try it",
    "Install",
    "Concepts",
    "CLI",
    "Library",
    "Tools and MCP servers",
    "Traces",
    "Evaluate, collect rollouts, train",
    "Development",
]


def _headings(level: str) -> list[str]:
    out = []
    for i, tok in enumerate(TOKENS):
        if tok.type == "heading_open" and tok.tag == level:
            out.append(TOKENS[i + 1].content)
    return out


def _fences(info: str | None = None) -> list[Any]:
    return [t for t in TOKENS if t.type == "fence" and (info is None or t.info.strip() == info)]


def test_readme_is_commonmark_with_one_title_and_the_sections_in_order() -> None:
    assert _headings("h1") == ["Swarm"]
    assert _headings("h2") == SECTIONS
    assert len(_headings("h3")) >= 3  # Models, rollouts, Ray, training


def test_every_code_fence_closes() -> None:
    """Regression: a line "``` See ..." is no closing fence, so everything after rendered as code."""
    fences = _fences()
    assert len(fences) >= 10
    for f in fences:
        start, end = f.map
        closer = LINES[end - 1]
        assert re.fullmatch(r"\s*(```+|~~~+)\s*", closer), f"the fence opened on line {start + 1} does not close"
    fence_lines = [line for line in LINES if re.match(r"\s{0,5}```", line)]
    assert len(fence_lines) == 2 * len(fences)


def _normal(text: str) -> list[str]:
    text = re.sub(r"[0-9a-f]{16}", "<id>", text)
    text = re.sub(r"\d+\.\d+s", "<t>s", text)
    return [line.rstrip() for line in text.splitlines() if "│ record" not in line and line.strip()]


def test_the_demo_output_is_what_the_demo_prints(tmp_path: Path) -> None:
    (shown,) = [f.content for f in _fences("text") if f.content.startswith("$ swarm run --demo capitals")]
    result = CliRunner().invoke(
        app, ["run", "--demo", "capitals", "-q", "-o", str(tmp_path)], env={"COLUMNS": "80", "SWARM_DEMO_LATENCY": "0"}
    )
    assert result.exit_code == 0
    assert _normal(shown)[1:] == _normal(result.stdout)


def test_install_and_test_commands() -> None:
    (install,) = [f.content for f in _fences("bash") if "pip install -e" in f.content]
    assert "swarm run" in install.splitlines()[-1]
    assert "bash scripts/dev-setup.sh && .venv/bin/pytest -q" in README
    assert ".venv/bin/pytest -q" in (ROOT / ".ci" / "run").read_text()


def test_library_example_runs() -> None:
    section = README.split("## Library", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.group(1), "README.md", "exec"), {})
    assert out.getvalue().split()[:2] == ["completed", "4"]


def _command(path: list[str]) -> Any:
    cmd: Any = typer.main.get_command(app)
    for part in path:
        cmd = cmd.commands[part]
    return cmd


def test_every_command_and_flag_the_readme_shows_exists() -> None:
    """Claims that hold: each `swarm ...` line in a shell block names a real command and real flags."""
    group = typer.main.get_command(app)
    seen = 0
    for fence in _fences("bash"):
        for line in fence.content.splitlines():
            line = line.split("  #")[0]
            for m in re.finditer(r"(?:^|[\s(|/])swarm ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?([^|)]*)", line):
                path = [m.group(1)]
                sub = getattr(group.commands.get(m.group(1)), "commands", None)  # type: ignore[attr-defined]
                rest = m.group(3)
                if sub is not None and m.group(2):
                    path.append(m.group(2))
                elif m.group(2):
                    rest = f" {m.group(2)}{rest}"
                cmd = _command(path)
                opts = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
                for flag in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", rest):
                    assert flag in opts, f"README: `swarm {' '.join(path)}` has no {flag} ({line.strip()})"
                seen += 1
    assert seen >= 15


def test_claims_that_did_not_hold_are_gone() -> None:
    text = " ".join(README.split())
    assert "ends with examples" not in text
    assert "Each flag means the same in `run`, `eval` and `rollout`" not in text
    assert "Upload JSON" not in text
