"""experiments/rescore.py scores committed answers again with today's scorers (a dev run whose one
table headed ``| Company Name | CEO | Flagship Product |`` was scored 0 before the column alignment)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from agent_swarm.orchestrator.eval_raw import read_raw, write_raw

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "experiments/results/yardstick-dev/snippet-titles-dev/wr4-dev-s2-v2-after"


def test_only_the_renamed_header_changes_and_a_written_run_reads_back(
    tmp_path: Path, repo_script: Callable[[str], ModuleType]
) -> None:
    rescore = repo_script("experiments/rescore.py")
    pairs = rescore.rescore(RUN)
    changed = {old.episode_id: (old.metric, new.metric) for old, new in pairs if old.metric != new.metric}
    assert changed == {"wide-research-dev-s2-9-swarm": (0.0, 1.0)}
    new = next(n for old, n in pairs if old.episode_id == "wide-research-dev-s2-9-swarm")
    assert new.success and new.items is not None and set(new.items.values()) == {1.0}
    assert "error" not in new.scores or new.scores["error"] is None
    written = rescore._write(RUN, pairs, tmp_path)
    rows, _ = read_raw(written / "episodes.jsonl.gz")
    assert [r.metric for r in rows] == [n.metric for _, n in pairs]
    assert (written / "manifest.json").is_file() and (written / "rescored.json").is_file()


def test_an_out_folder_that_would_write_a_run_over_itself_is_refused_before_anything_is_written(
    tmp_path: Path, repo_script: Callable[[str], ModuleType]
) -> None:
    rescore = repo_script("experiments/rescore.py")
    before = (RUN / "episodes.jsonl.gz").read_bytes()
    with pytest.raises(SystemExit, match="would overwrite the run"):
        rescore.check_out([RUN], RUN.parent)
    assert (RUN / "episodes.jsonl.gz").read_bytes() == before
    rescore.check_out([RUN], tmp_path)  # another folder is fine


def test_a_starter_run_is_scored_again_by_its_workload_from_the_records_in_its_traces(
    tmp_path: Path, repo_script: Callable[[str], ModuleType]
) -> None:
    # Starter tasks have no verifier: the workload scores the episode's record (kept in traces.tar.gz).
    rescore = repo_script("experiments/rescore.py")
    run = ROOT / "experiments/results/adapter-05b-test/starter-test-s2101-05b-none"
    pairs = rescore.rescore(run)
    assert [new.metric for _, new in pairs] == [old.metric for old, _ in pairs]  # the answers' scores stand
    assert all("per_item" in new.scores for _, new in pairs)  # scored again, by the workload
    # a recorded score that is wrong is corrected from the record
    copy = tmp_path / run.name
    copy.mkdir()
    for name in ("manifest.json", "tasks.jsonl.gz", "traces.tar.gz"):
        (copy / name).write_bytes((run / name).read_bytes())
    rows, _ = read_raw(run / "episodes.jsonl.gz")
    write_raw(copy / "episodes.jsonl.gz", [r.model_copy(update={"metric": 0.5}) for r in rows])
    again = rescore.rescore(copy)
    assert [new.metric for _, new in again] == [old.metric for old, _ in pairs]
