"""Everyday conventions of the `swarm` CLI: --version, one meaning per flag across run/eval/rollout,
help with defaults and examples that reads at 80 columns, and rollouts that refuse to mix rewards."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app
from agent_swarm.swarm import __version__

runner = CliRunner()


def _commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for name, cmd in getattr(group, "commands", {}).items():
        yield (*path, name), cmd
        yield from _commands(cmd, (*path, name))


COMMANDS = [p for p, _ in _commands(typer.main.get_command(app))]


def test_version_flag_and_command() -> None:
    for args in (["--version"], ["-V"], ["version"]):
        r = runner.invoke(app, args)
        assert r.exit_code == 0 and r.stdout.strip() == f"agent-swarm {__version__}"


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_every_command_has_examples_and_help_fits_80_columns(path: tuple[str, ...]) -> None:
    r = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    too_long = [line for line in r.stdout.splitlines() if len(line) > 80]
    assert not too_long, too_long
    examples = r.stdout.split("Examples", 1)[1].splitlines() if "Examples" in r.stdout else []
    assert any(line.strip().startswith(f"swarm {path[0]}") for line in examples), r.stdout


def _option_names(path: str) -> dict[str, tuple[str, ...]]:
    cmd = typer.main.get_command(app)
    for part in path.split():
        cmd = cmd.commands[part]  # type: ignore[attr-defined]
    return {o: tuple(p.opts) for p in cmd.params for o in p.opts}


def test_one_meaning_per_flag_across_run_eval_and_rollout() -> None:
    run, ev, ro = _option_names("run"), _option_names("eval"), _option_names("rollout")
    # -n is a number of tasks wherever it exists (run: of a workload); run's per-stage width has no short flag.
    for names in (run, ev, ro):
        assert names["-n"] == ("-n", "--num-tasks")
    # --tasks / -t is a task file; --knob a workload knob; -k the rollout group size.
    assert run["--tasks"][:2] == ("--tasks", "-t") and ro["--tasks"] == ("--tasks", "-t") and "--tasks" not in ev
    assert "-k" not in ev and ev["--knob"] == ("--knob",) and ro["-k"] == ("--group-size", "-k")
    # --max-concurrency is sub-agents at once in all three; episodes at once is its own name.
    for names in (run, ev, ro):
        assert names["--max-concurrency"] == ("--max-concurrency",)
        assert names["-q"] == ("--quiet", "-q") and names["-o"] == ("--out", "-o") and names["-b"][0] == "--backend"
        assert "--max-concurrent" not in names
    assert "--concurrent-episodes" in ro
    # the same shared options, with their defaults and units in the help
    help_text = " ".join(runner.invoke(app, ["run", "--help"]).stdout.split())
    assert "episode budget in critical steps [default: 32, or the config's]" in help_text
    assert "seconds one sub-agent may run [default: 300" in help_text


def test_scripted_and_gold_mean_the_same_scripted_policy(tmp_path: Path) -> None:
    results = {}
    for name in ("scripted", "gold"):
        r = runner.invoke(
            app,
            [
                "eval",
                "-w",
                "wide-lookup",
                "--split",
                "train",
                "-b",
                name,
                "-n",
                "1",
                "--mode",
                "swarm",
                "-o",
                str(tmp_path),
                "--json",
            ],
        )
        assert r.exit_code == 0, r.output
        results[name] = json.loads(r.stdout)["summaries"]["swarm"]["metric"]
    assert results["scripted"] == results["gold"] == 1.0
    demo = runner.invoke(app, ["run", "-b", "gold", "capitals", "-o", str(tmp_path), "-q", "--json-summary"])
    assert demo.exit_code == 0 and json.loads(demo.stdout)["status"] == "completed"


def test_a_resumed_rollout_refuses_a_changed_reward(tmp_path: Path) -> None:
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"id": "a", "prompt": "capitals"}) + "\n")
    args = ["rollout", "-b", "scripted", "-t", str(tasks), "-o", str(tmp_path / "o"), "-k", "2", "-q"]
    first = runner.invoke(app, [*args, "--lambda1", "0.5"])
    assert first.exit_code == 0, first.output
    same = runner.invoke(app, [*args, "--lambda1", "0.5", "--json"])
    assert same.exit_code == 0 and json.loads(same.stdout.splitlines()[-1])["episodes_resumed"] == 2
    changed = runner.invoke(app, [*args, "--lambda1", "0.1"])
    assert changed.exit_code == 2
    said = " ".join(changed.stderr.split())
    assert "new --out directory" in said
    # Only what differs, as key path old → new (not two copies of every setting).
    assert "settings.reward.lambda1.start 0.5 → 0.1" in said, said
    assert "group_size" not in said and len(said) < 300


def test_scripted_policies_report_no_invented_token_counts(tmp_path: Path) -> None:
    table = runner.invoke(
        app,
        [
            "eval",
            "-w",
            "wide-lookup",
            "--split",
            "train",
            "-b",
            "scripted",
            "-n",
            "1",
            "--mode",
            "swarm",
            "-o",
            str(tmp_path),
        ],
        env={"COLUMNS": "200"},
    )
    assert table.exit_code == 0, table.output
    assert "not measured (scripted)" in table.stdout
    assert "critical=" in table.stderr  # a line per finished episode ...
    quiet = runner.invoke(
        app,
        [
            "eval",
            "-w",
            "wide-lookup",
            "--split",
            "train",
            "-b",
            "scripted",
            "-n",
            "1",
            "--mode",
            "swarm",
            "-o",
            str(tmp_path),
            "-q",
        ],
    )
    assert quiet.exit_code == 0 and "critical=" not in quiet.stderr  # ... unless --quiet
    run = runner.invoke(app, ["run", "--demo", "capitals", "-o", str(tmp_path), "-q"], env={"COLUMNS": "200"})
    assert "not measured (a scripted policy has no tokenizer" in run.stdout and " in / " not in run.stdout


def test_a_scripted_rollout_refuses_tasks_the_script_was_not_written_for(tmp_path: Path) -> None:
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"id": "mine", "prompt": "Summarise the news"}) + "\n")
    args = ["rollout", "-b", "scripted", "-t", str(tasks), "-o", str(tmp_path / "o"), "-k", "1", "-q"]
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and not (tmp_path / "o").exists()
    assert "only plays the built-in demo tasks (budget, capitals)" in r.stderr and "'mine'" in r.stderr
    tasks.write_text(json.dumps({"id": "b", "prompt": "budget"}) + "\n")  # a demo's name is its task
    ok = runner.invoke(app, [*args, "--json"])
    assert ok.exit_code == 0, ok.output
    entry = json.loads((tmp_path / "o" / "episodes.jsonl").read_text().splitlines()[0])
    assert entry["record"]["task"]["prompt"].startswith("Survey the capitals")
    assert entry["record"]["status"] == "budget_exhausted"


def _option_help(path: str, flag: str) -> str:
    cmd = typer.main.get_command(app).commands[path]  # type: ignore[attr-defined]
    return next(str(p.help) for p in cmd.params if flag in p.opts)


@pytest.mark.parametrize(
    "flag",
    ["--knob", "--max-critical-steps", "--budget", "--max-subagent-steps", "--max-concurrency", "--episode-timeout"],
)
def test_the_episode_and_workload_options_read_the_same_in_run_eval_and_rollout(flag: str) -> None:
    helps = {path: _option_help(path, flag) for path in ("run", "eval", "rollout")}
    assert len(set(helps.values())) == 1, helps


def test_the_episode_flags_become_the_same_config_overrides_in_every_command() -> None:
    from agent_swarm.orchestrator.cli.options import episode_overrides

    overrides = episode_overrides(
        ["tokens=100", "subagents=3"],
        max_critical_steps=5,
        max_subagent_steps=None,
        max_concurrency=2,
        episode_timeout=60.0,
        subagent_timeout_s=9.0,
    )
    assert overrides == {
        "max_critical_steps": 5,
        "max_subagent_steps": None,
        "max_concurrency": 2,
        "episode_timeout_s": 60.0,
        "subagent_timeout_s": 9.0,
        "max_subagents_per_episode": 3,
        "budgets": {"max_tokens": 100},
    }


def test_run_and_rollout_refuse_a_bad_option_value_in_the_same_one_line_naming_the_field(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "prompt": "capitals"}\n')
    out = str(tmp_path / "out")
    commands = {
        "run": ["run", "--demo", "capitals", "-b", "scripted", "--budget", "turns=0", "-q", "-o", out],
        "rollout": ["rollout", "-t", str(tasks), "-b", "scripted", "--budget", "turns=0", "-q", "-o", out],
    }
    for name, args in commands.items():
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (name, r.output)
        assert r.stderr.strip() == (
            "error: invalid option value: budgets.max_turns: Input should be greater than or equal to 2"
        ), name


def test_flags_mean_one_thing_and_metavars_read_as_words() -> None:
    # -n is a number of tasks wherever it exists; -c a swarm config file; listing limits are --limit.
    assert "-n" not in _option_names("traces list") and "--limit" in _option_names("traces list")
    assert "-c" not in _option_names("mcp list") and "--mcp-config" in _option_names("mcp list")
    paths = ("run", "eval", "rollout", "train", "agents list", "mcp list", "traces list", "traces show", "traces push")
    for path in paths:
        text = runner.invoke(app, [*path.split(), "--help"], env={"COLUMNS": "120"}).stdout
        options = [line for line in text.splitlines() if line.lstrip().startswith("-")]
        assert not [line for line in options if re.search(r"list\[|<str>|<int range>|<float range>", line)], (
            path,
            options,
        )


def test_a_yaml_config_is_named_as_yaml(tmp_path: Path) -> None:
    cfg = tmp_path / "swarm.yaml"
    cfg.write_text("swarm:\n  max_critical_steps: 3\n")
    r = runner.invoke(app, ["run", "--demo", "capitals", "-c", str(cfg), "-o", str(tmp_path)])
    assert r.exit_code == 2
    assert "is YAML; swarm reads TOML (.toml) or JSON" in " ".join(r.stderr.split())


def test_records_and_trace_files_are_private_to_the_user(tmp_path: Path) -> None:
    r = runner.invoke(app, ["run", "--demo", "capitals", "-q", "-p", "-o", str(tmp_path)])
    assert r.exit_code == 0
    (episode,) = tmp_path.glob("*/episode.json")
    assert episode.stat().st_mode & 0o777 == 0o600
    assert (episode.parent / "trace.jsonl").stat().st_mode & 0o777 == 0o600


def test_rollout_counts_skipped_task_lines(tmp_path: Path) -> None:
    tasks = tmp_path / "t.jsonl"
    tasks.write_text('{"id": "a", "prompt": "capitals"}\n{"prompt": \n{"prompt": 3}\n')
    args = ["rollout", "-b", "scripted", "-t", str(tasks), "-o", str(tmp_path / "o"), "-k", "1", "-q"]
    r = runner.invoke(app, args, env={"COLUMNS": "120"})
    assert "skipped task lines" in r.stdout and "2 (lines 2, 3 of the task file)" in r.stdout, r.output


def test_train_with_a_missing_config_fails_at_once_without_torch(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys\nfrom agent_swarm.orchestrator.cli.app import main\n"
        "sys.argv = ['swarm', 'train', '-c', sys.argv[1]]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    print('exit', e.code, 'torch' in sys.modules)\n"
    )
    for name in ("missing.toml", "train.yaml"):
        if name.endswith(".yaml"):
            (tmp_path / name).write_text("steps: 3\n")
        r = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / name)], capture_output=True, text=True, timeout=60, check=False
        )
        assert "exit 2 False" in r.stdout, (r.stdout, r.stderr)
        assert ("does not exist" if name == "missing.toml" else "is YAML") in r.stderr


@pytest.mark.parametrize("args", [["demo-list"], ["agents", "list"], ["traces", "list"], ["doctor"]])
def test_listing_commands_print_one_json_object_per_line(args: list[str], tmp_path: Path) -> None:
    r = runner.invoke(app, [*args, "--json"], env={"SWARM_CACHE_DIR": str(tmp_path)})
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert all(isinstance(row, dict) for row in rows)
    if args == ["demo-list"]:
        assert {row["name"] for row in rows} == {"capitals", "budget"}


def test_single_object_commands_print_one_json_object_on_one_line_with_a_fixed_shape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/cli.md: `--json` on a command that answers with one thing is one object on one line, whose
    top-level keys are always the same (a key with nothing to say is null or empty, never missing)."""
    from agent_swarm.orchestrator.eval import EvalReport
    from agent_swarm.orchestrator.rollout.collection import RolloutSummary

    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.jsonl").write_text('{"prompt": "capitals"}\n')
    cases: list[tuple[list[str], set[str]]] = [
        (["models"], {"default_local_model", "models", "engines", "cache_dir"}),
        (
            ["eval", "-w", "wide-lookup", "--split", "train", "-b", "gold", "-n", "1", "--out", "ev"],
            set(EvalReport.model_fields),
        ),
        (["rollout", "-b", "scripted", "-t", "t.jsonl", "-k", "1", "-o", "ro", "-q"], set(RolloutSummary.model_fields)),
    ]
    for args, keys in cases:
        r = runner.invoke(app, [*args, "--json"], env={"SWARM_CACHE_DIR": str(tmp_path / "cache")})
        assert r.exit_code == 0, (args, r.output)
        assert r.stdout.endswith("\n") and r.stdout.count("\n") == 1, (args, r.stdout[:300])
        obj = json.loads(r.stdout)
        assert isinstance(obj, dict) and set(obj) == keys, (args, sorted(obj))
