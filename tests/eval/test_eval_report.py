"""Reports regenerate from committed raw files alone, and say n, split, seed and provenance."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.eval_raw import RAW_FILE, read_raw, write_manifest, write_raw
from agent_swarm.orchestrator.eval_report import curve, load_runs, main, render_curve, render_report, render_summary
from agent_swarm.swarm.errors import ConfigError

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[2]
TEST_RUNS = [ROOT / "experiments/results" / d for d in ("yardstick-test", "width_curve", "adapter-05b-test")]
runner = CliRunner()


def test_the_committed_table_regenerates_from_the_committed_raw_files() -> None:
    expected = (DATA / "report-fixture.md").read_text(encoding="utf-8")
    assert render_report(load_runs([DATA / "report-fixture"])) == expected
    r = runner.invoke(app, ["eval", "--report", str(DATA / "report-fixture")])
    assert r.exit_code == 0 and r.stdout == expected
    # the table says what was compared, on which split and how many tasks
    assert "wide-lookup · train split · seeds 0" in expected and "| swarm · gold-orchestrator vs single" in expected
    assert "n < 30: not a headline" in expected and "±" not in expected


def test_a_directory_of_runs_and_repeated_runs(tmp_path: Path) -> None:
    """Two runs of the same tasks: per-task means are paired, the run means' range is shown."""
    src = load_runs([DATA / "report-fixture"])[0]
    for i, shift in ((1, 0.0), (2, 0.5)):
        root = tmp_path / f"run{i}"
        root.mkdir()
        write_manifest(root, src.manifest.model_copy(update={"run_id": f"run{i}"}))
        rows = [r.model_copy(update={"run_id": f"run{i}", "metric": min(1.0, r.metric + shift)}) for r in src.rows]
        write_raw(root / RAW_FILE, rows)
    assert len(read_raw(tmp_path / "run2" / RAW_FILE)[0]) == 8
    text = render_report(load_runs([tmp_path]))
    assert "runs: run1, run2" in text
    assert "| 0.250 (repeats 0.000–0.500, 2 repeats; 4 of 4 tasks differ) |" in text  # single: 0, then 0.5
    assert "| 4 | 1.000 | 0.250 | +0.750 |" in text
    assert main([str(tmp_path)]) == 0 and main([]) == 2 and main([str(tmp_path / "none")]) == 2


def test_the_width_curve_reads_each_runs_resolved_knobs(tmp_path: Path) -> None:
    src = load_runs([DATA / "report-fixture"])[0]
    for width, steps in ((2, 5), (8, 9)):
        root = tmp_path / f"n{width}"
        root.mkdir()
        write_manifest(root, src.manifest.model_copy(update={"run_id": f"n{width}", "knobs": {"entities": width}}))
        write_raw(root / RAW_FILE, [r.model_copy(update={"critical_steps": steps}) for r in src.rows])
    table = render_curve(load_runs([tmp_path]), "entities")
    assert "| 2 | swarm | 4 | 1.000 | 5 |" in table and "| 8 | single | 4 | 0.000 | 9 |" in table
    assert [(p.value, p.arm) for p in curve(load_runs([tmp_path]), "entities")][:2] == [(2, "swarm"), (2, "single")]
    assert main(["--curve", "entities", str(tmp_path)]) == 0 and main(["--curve", "nope", str(tmp_path)]) == 2


def test_a_sampled_comparison_needs_three_samples_per_task(tmp_path: Path) -> None:
    src = load_runs([DATA / "report-fixture"])[0]
    root = tmp_path / "sampled"
    root.mkdir()
    write_manifest(root, src.manifest)
    hot = {**src.rows[0].config, "orchestrator_sampling": {"temperature": 0.7}}
    model = src.rows[0].provenance.model_copy(update={"backend": "local"})
    rows = [r.model_copy(update={"config": hot, "provenance": model}) for r in src.rows]
    write_raw(root / RAW_FILE, rows)
    text = render_report(load_runs([root]))
    assert "sampled with < 3 samples per task" in text
    # a model's tokens are measured: by role, side by side, the total against the first arm's
    assert "Tokens by role" in text and "| 1.00× |" in text
    write_raw(root / RAW_FILE, [r.model_copy(update={"sample": i}) for r in rows for i in range(3)])
    assert "sampled with" not in render_report(load_runs([root]))
    # greedy rows (the committed fixture) need no samples
    assert "sampled with" not in render_report(load_runs([DATA / "report-fixture"]))


def test_an_episode_written_twice_counts_once(tmp_path: Path) -> None:
    src = load_runs([DATA / "report-fixture"])[0]
    root = tmp_path / "twice"
    root.mkdir()
    write_manifest(root, src.manifest)
    write_raw(root / RAW_FILE, [*src.rows, *src.rows[:3]])
    run = load_runs([root])[0]
    assert len(run.rows) == 8 and run.damaged == 3
    text = render_report([run])
    assert "episodes: 8" in text and "3 damaged raw entr(y/ies) skipped" in text


def test_cli_prints_a_curve_from_raw_files(tmp_path: Path) -> None:
    src = load_runs([DATA / "report-fixture"])[0]
    root = tmp_path / "n3"
    root.mkdir()
    write_manifest(root, src.manifest.model_copy(update={"knobs": {"entities": 3}}))
    write_raw(root / RAW_FILE, list(src.rows))
    r = runner.invoke(app, ["eval", "--report", str(root), "--curve", "entities"])
    assert r.exit_code == 0 and "| 3 | swarm | 4 | 1.000 |" in r.stdout
    bad = runner.invoke(app, ["eval", "--report", str(root), "--curve", "width"])
    assert bad.exit_code == 2 and "no knob 'width'" in bad.output


def test_cli_reports_several_run_directories_at_once(tmp_path: Path) -> None:
    src = load_runs([DATA / "report-fixture"])[0]
    dirs = []
    for i in (1, 2):
        root = tmp_path / f"run{i}"
        root.mkdir()
        write_manifest(root, src.manifest.model_copy(update={"run_id": f"run{i}"}))
        write_raw(root / RAW_FILE, [r.model_copy(update={"run_id": f"run{i}"}) for r in src.rows])
        dirs.append(str(root))
    r = runner.invoke(app, ["eval", "--report", *dirs])
    assert r.exit_code == 0, r.output
    assert "runs: run1, run2" in r.stdout and "(repeats 1.000–1.000, 2 repeats; 0 of 4 tasks differ)" in r.stdout
    stray = runner.invoke(app, ["eval", *dirs])
    assert stray.exit_code == 2 and "--report reads run directories" in stray.output


def test_the_committed_summary_of_every_test_run_regenerates_from_their_raw_files() -> None:
    # experiments/results/SUMMARY.md: one row per committed test-split run; a run added without
    # regenerating it fails here (the command is in experiments/README.md)
    expected = (ROOT / "experiments/results/SUMMARY.md").read_text(encoding="utf-8")
    assert render_summary(load_runs(TEST_RUNS)) == expected
    row = next(line for line in expected.splitlines() if line.startswith("| bfcl-parallel-test-s2202-"))
    assert "| 30 | 0.330 | 0.467 | 0.606 | -0.137 [-0.238, -0.027], p = 0.018 | -0.276 [-0.386, -0.162]" in row


def test_a_summary_has_a_row_per_run_and_refuses_an_arm_on_two_models(tmp_path: Path) -> None:
    src = load_runs([DATA / "report-fixture"])[0]
    for i, shift in ((1, 0.0), (2, -0.5)):
        root = tmp_path / f"run{i}"
        root.mkdir()
        write_manifest(root, src.manifest.model_copy(update={"run_id": f"run{i}"}))
        write_raw(root / RAW_FILE, [r.model_copy(update={"metric": max(0.0, r.metric + shift)}) for r in src.rows])
    text = render_summary(load_runs([tmp_path]))
    rows = [line for line in text.splitlines() if line.startswith("| run")]
    assert [r.split(" | ")[0] for r in rows[1:]] == ["| run1", "| run2"]  # the header, then one row per run
    # the fixture: swarm 1 and single 0 on each of its 4 tasks (run2: swarm 0.5); swarm − single, paired
    assert "| 1.000 | — | 0.000 | — | +1.000 [+1.000, +1.000], p = 0.12 (n = 4: not a headline) |" in rows[1]
    assert "| 0.500 | — | 0.000 | — | +0.500 [+0.500, +0.500], p = 0.12 (n = 4: not a headline) |" in rows[2]
    assert main(["--summary", str(tmp_path)]) == 0
    cli = runner.invoke(app, ["eval", "--report", "--summary", str(tmp_path)])
    assert cli.exit_code == 0 and cli.stdout == text
    both = runner.invoke(app, ["eval", "--report", "--summary", "--curve", "entities", str(tmp_path)])
    assert both.exit_code == 2 and "give one" in both.output
    other = src.rows[0].provenance.model_copy(update={"model": "another-model"})
    write_raw(tmp_path / "run2" / RAW_FILE, [*src.rows[1:], src.rows[0].model_copy(update={"provenance": other})])
    with pytest.raises(ConfigError, match="an arm on more than one model"):
        render_summary(load_runs([tmp_path / "run2"]))
