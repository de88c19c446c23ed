"""Mutation testing of the core with mutmut 3 (issue 29): how many planted bugs the tests catch.

    pip install mutmut==3.8.1
    flock /work/heavy.lock python bench/mutation.py dag --minutes 9     # repeat until it says "done"
    python bench/mutation.py --table                                    # the kill rates in bench/README.md

Each module runs in a scratch copy of this checkout (``/tmp/swarm-mutation/NAME``) against only the tests
that cover it (``MODULES``), so a run is affordable; mutmut keeps its results there, so a run cut by
``--minutes`` resumes where it stopped. When every mutant has a result, the per-mutant statuses, the
surviving mutants' diffs, the command, the commit and the test files go to
``bench/results/mutation/NAME.json``. ``EQUIVALENT`` lists the survivors judged equivalent (no test can
tell them apart from the original), each with why; the kill rate is over the others.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "mutation"
SCRATCH = Path(os.environ.get("SWARM_MUTATION_DIR", "/tmp/swarm-mutation"))
SOURCES = ["swarm", "orchestrator", "subagents", "tools", "workloads"]

# name -> (file to mutate, mutant-name patterns to run (mutmut's own names), tests that cover it)
MODULES: dict[str, tuple[str, list[str], list[str]]] = {
    "dag": (
        "swarm/dag.py",
        ["swarm.dag.*"],
        ["tests/core/test_dag.py", "tests/core/test_dag_details.py", "tests/core/test_hedging.py"],
    ),
    "admission": (
        "orchestrator/admission.py",
        ["orchestrator.admission.*"],
        ["tests/core/test_admission.py", "tests/core/test_protocol.py"],
    ),
    "rewards": (
        "swarm/rl/rewards.py",
        ["swarm.rl.rewards.*"],
        [
            "tests/rewards/test_parl_reward.py",
            "tests/rewards/test_parl_reward_details.py",
            "tests/rl/test_rl_maths.py",
        ],
    ),
    "table": ("swarm/verifiers/table.py", ["swarm.verifiers.table.*"], ["tests/rewards"]),
    "starter": (  # the score functions only (the rest is task generation and gold policies)
        "workloads/starter.py",
        [
            f"workloads.starter.x_{f}__mutmut_*"
            for f in (
                "_numbers",
                "_key",
                "_spans",
                "_respectively",
                "_attributed",
                "_positional",
                "_score_text",
                "_expression",
                "_operators",
                "_arithmetic_units",
                "_score_arithmetic",
                "score_answer",
            )
        ],
        ["tests/workloads/test_starter.py", "tests/workloads/test_starter_attacks.py"],
    ),
    "trajectory": (
        "swarm/rl/trajectory.py",
        ["swarm.rl.trajectory.*"],
        [
            "tests/trajectory/test_trajectory_details.py",
            "tests/trajectory/test_trajectory_model.py",
            "tests/trajectory/test_export_formats.py",
            "tests/rewards/test_reward_exports.py",
        ],
    ),
}

# mutant name -> why no test can tell it from the original (filled in from the survivors, by reading them)
EQUIVALENT: dict[str, str] = {}


def _prepare(name: str) -> Path:
    target, _, tests = MODULES[name]
    work = SCRATCH / name
    if (work / "mutants").exists():
        return work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for f in files:
        if (ROOT / f).is_file():
            (work / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, work / f)
    config = "\n".join(
        [
            "",
            "[tool.mutmut]",
            f"source_paths = {json.dumps(SOURCES)}",
            f"only_mutate = {json.dumps([target])}",
            f"pytest_add_cli_args_test_selection = {json.dumps(tests)}",
            'pytest_add_cli_args = ["-p", "no:randomly", "-p", "no:cacheprovider", "-x", "-q"]',
            "",
        ]
    )
    with (work / "pyproject.toml").open("a", encoding="utf-8") as out:
        out.write(config)
    return work


def _mutmut(work: Path, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """``mutmut ARGS`` in ``work``; on ``timeout`` its whole process group (the forked mutant runs too)
    is killed and ``TimeoutExpired`` raised. ``SWARM_MUTMUT_LIB``: where mutmut is installed, if not here."""
    env = {**os.environ, "PYTHONPATH": os.environ.get("SWARM_MUTMUT_LIB", "")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mutmut", *args],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _statuses(work: Path, patterns: list[str]) -> dict[str, str]:
    out = _mutmut(work, "results", "--all", "true").stdout
    wanted = [re.compile("^" + re.escape(p).replace(r"\*", ".*") + "$") for p in patterns]
    statuses = {}
    for line in out.splitlines():
        if ":" not in line:
            continue
        mutant, status = (x.strip() for x in line.rsplit(":", 1))
        if any(w.match(mutant) for w in wanted):
            statuses[mutant] = status
    return statuses


def run(name: str, minutes: float) -> None:
    patterns = MODULES[name][1]
    work = _prepare(name)
    started = time.time()
    try:
        proc = _mutmut(work, "run", "--max-children", "2", *patterns, timeout=minutes * 60)
        print(proc.stdout[-2000:], proc.stderr[-2000:], sep="\n")
    except subprocess.TimeoutExpired:
        print(f"{name}: stopped after {minutes} min; run again to go on")
    statuses = _statuses(work, patterns)
    pending = [m for m, s in statuses.items() if s in ("not checked", "running")]
    print(f"{name}: {len(statuses)} mutants, {len(pending)} not checked yet ({time.time() - started:.0f} s)")
    if statuses and not pending:
        _save(name, work, statuses)


def _save(name: str, work: Path, statuses: dict[str, str]) -> None:
    target, patterns, tests = MODULES[name]
    survivors = {m: _mutmut(work, "show", m).stdout for m, s in statuses.items() if s != "killed"}
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    RESULTS.mkdir(parents=True, exist_ok=True)
    data = {
        "module": target,
        "mutants": patterns,
        "tests": tests,
        "command": f"python bench/mutation.py {name}",
        "tool": "mutmut 3.8.1",
        "commit": commit,
        "statuses": dict(sorted(statuses.items())),
        "survivor_diffs": survivors,
    }
    (RESULTS / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"{name}: done -> {RESULTS / f'{name}.json'}")


def table() -> list[dict[str, Any]]:
    """Per module: mutants, killed, survived, equivalent (excluded), kill rate over the others."""
    rows = []
    for path in sorted(RESULTS.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        st = data["statuses"]
        equivalent = [m for m in st if m in EQUIVALENT and st[m] != "killed"]
        killed = sum(1 for s in st.values() if s == "killed")
        judged = len(st) - len(equivalent)
        rows.append(
            {
                "module": data["module"],
                "mutants": len(st),
                "killed": killed,
                "not_killed": {s: n for s in set(st.values()) - {"killed"} if (n := list(st.values()).count(s))},
                "equivalent_excluded": len(equivalent),
                "kill_rate": round(killed / judged, 3) if judged else None,
                "commit": data["commit"][:10],
            }
        )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("module", nargs="?", choices=sorted(MODULES))
    p.add_argument("--minutes", type=float, default=9.0, help="stop after this long (results so far are kept)")
    p.add_argument("--table", action="store_true", help="print the kill rates of the committed results")
    args = p.parse_args()
    if args.table or args.module is None:
        for row in table():
            print(json.dumps(row))
        return
    run(args.module, args.minutes)


if __name__ == "__main__":
    main()
