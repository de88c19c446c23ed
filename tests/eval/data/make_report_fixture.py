"""Writes the committed raw-data fixture of ``test_eval_report.py`` (a scripted run, no model):

    PYTHONPATH=. python tests/eval/data/make_report_fixture.py

Wide lookup, 4 tasks of 2 entities x 2 attributes: the swarm arm plays the workload's gold policy; the
single arm is a scripted agent that answers at once with the names and no looked-up values. Then it
writes ``report-fixture.md``, the report the test expects to regenerate from those raw files.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio

from agent_swarm.orchestrator.eval import run_eval
from agent_swarm.orchestrator.eval_report import load_runs, render_report
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.records import Task
from agent_swarm.swarm.testing import FunctionBackend
from agent_swarm.workloads import Mode, get_workload

HERE = Path(__file__).parent
RUN = "report-fixture"


def main() -> None:
    wl = get_workload("wide-lookup")
    tasks = wl.tasks(4, seed=0, split="train", entities=2, attributes=2)

    def names_only(request: ModelRequest) -> Completion:
        return Completion(text="I could not look anything up.")

    def backends(task: Task, mode: Mode) -> tuple[FunctionBackend, FunctionBackend | None]:
        if mode == "swarm":
            gold = wl.gold_policy(task, mode)
            return gold.orchestrator, gold.subagent  # type: ignore[return-value]
        return FunctionBackend(names_only, model="scripted-single"), None

    shutil.rmtree(HERE / RUN, ignore_errors=True)
    anyio.run(lambda: run_eval(wl, tasks, backends, out_dir=HERE, run_id=RUN, backend_name="scripted"))
    for extra in ("episodes", "report.json", "tasks.jsonl"):  # the raw rows and manifest are what reports need
        path = HERE / RUN / extra
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    (HERE / f"{RUN}.md").write_text(render_report(load_runs([HERE / RUN])), encoding="utf-8")


if __name__ == "__main__":
    main()
