"""experiments/rescore.py scores committed answers again with today's scorers (here: a dev run whose one
table headed ``| Company Name | CEO | Flagship Product |`` was scored 0 before the column alignment)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from agent_swarm.orchestrator.eval_raw import read_raw

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
