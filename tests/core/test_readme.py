"""README's promises: the two opening commands, and the library example runs as printed."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_readme_opens_with_two_commands_and_ci_runs_the_same_test_command() -> None:
    first_block = re.search(r"```bash\n(.*?)```", README, re.S)
    assert first_block is not None
    commands = [line for line in first_block.group(1).splitlines() if line.strip()]
    assert len(commands) == 2
    assert "swarm run" in commands[0]
    test_command = commands[1].split("&&")[-1].strip()
    assert "pytest" in test_command
    assert test_command in (ROOT / ".ci" / "run").read_text()


def test_library_example_runs() -> None:
    section = README.split("## Library", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.group(1), "README.md", "exec"), {})
    assert out.getvalue().split()[:2] == ["completed", "4"]
