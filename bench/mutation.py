"""Mutation testing of the core with mutmut 3 (issue 29): how many planted bugs the tests catch.

    pip install mutmut==3.8.1            # or SWARM_MUTMUT_LIB=DIR: a folder mutmut was installed into (--target)
    flock /work/heavy.lock python bench/mutation.py dag --minutes 9     # repeat until it says "done"
    python bench/mutation.py --table                                    # the kill rates in bench/README.md
    python bench/mutation.py --changed main --minutes 4                 # CI: the functions changed since main

Each module runs in a scratch copy of this checkout (``$SWARM_MUTATION_DIR/NAME``, default
``/tmp/swarm-mutation``) against only the tests that cover it (``MODULES``), so a run is affordable;
mutmut keeps its results there, so a run cut by ``--minutes`` resumes with the mutants not checked yet
(``--fresh`` starts over from this checkout). mutmut skips decorated functions, so in the scratch copy
each registry decorator (``@SCHEDULES.register("linear")``, ``@register_verifier(...)``) becomes the
same call after the function (:func:`_undecorate`): the registered schedules, advantages, reward forms
and verifiers are mutated too. When every mutant has a result, the per-mutant statuses,
the surviving mutants' diffs, the command, the commit, the test files and each chunk's time and load go
to ``bench/results/mutation/NAME.json.gz``.

Survivors judged *equivalent* (no test can tell them from the original: same behaviour on every input)
are listed, each with its diff and one line why, in ``bench/results/mutation/equivalent.json``; a
judgement counts only while its diff is still the survivor's diff. The kill rate is
killed / (mutants - equivalent); a timeout (the mutant made the tests hang) counts as caught and is
reported apart.
"""

from __future__ import annotations

import argparse
import ast
import gzip
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
EQUIVALENT = RESULTS / "equivalent.json"
SCRATCH = Path(os.environ.get("SWARM_MUTATION_DIR", "/tmp/swarm-mutation"))
SOURCES = ["swarm", "orchestrator", "subagents", "tools", "workloads"]
# The scratch copy holds the packages as real folders under agent_swarm/ (the checkout's agent_swarm/ has
# symlinks, which mutmut neither follows nor copies), so mutmut's mutant names (from file paths) are the
# module names the tests import: agent_swarm.swarm.dag.x_f__mutmut_1.
PACKAGE = "agent_swarm"
CAUGHT = ("killed", "timeout")
PENDING = ("not checked", "running", "check was interrupted by user", "segfault")

# name -> (file to mutate, mutant-name patterns to run (mutmut's own names), tests that cover it)
MODULES: dict[str, tuple[str, list[str], list[str]]] = {
    "dag": (
        "swarm/dag.py",
        ["agent_swarm.swarm.dag.*"],
        ["tests/core/test_dag.py", "tests/core/test_dag_details.py", "tests/core/test_hedging.py"],
    ),
    "admission": (
        "orchestrator/admission.py",
        ["agent_swarm.orchestrator.admission.*"],
        ["tests/core/test_admission.py", "tests/core/test_protocol.py"],
    ),
    "rewards": (
        "swarm/rl/rewards.py",
        ["agent_swarm.swarm.rl.rewards.*"],
        [
            "tests/rewards/test_parl_reward.py",
            "tests/rewards/test_parl_reward_details.py",
            "tests/rewards/test_parallel_coverage.py",
            "tests/rl/test_rl_maths.py",
        ],
    ),
    "table": (
        "swarm/verifiers/table.py",
        ["agent_swarm.swarm.verifiers.table.*"],
        [
            "tests/rewards/test_table_cells.py",
            "tests/rewards/test_table_scorer.py",
            "tests/rewards/test_table_adversarial.py",
            "tests/rewards/test_table_attacks.py",
        ],
    ),
    "starter": (  # the score functions only (the rest is task generation and gold policies)
        "workloads/starter.py",
        [
            f"agent_swarm.workloads.starter.x_{f}__mutmut_*"
            for f in (
                "_numbers",
                "_key",
                "_spans",
                "_respectively",
                "_attributed",
                "_positional",
                "_one_per_unit",
                "_score_text",
                "_expression",
                "_operators",
                "_arithmetic_units",
                "_score_arithmetic",
                "score_answer",
            )
        ]
        + ["agent_swarm.workloads.starter.xǁ_Factsǁ*"],
        ["tests/workloads/test_starter.py", "tests/workloads/test_starter_attacks.py"],
    ),
    "trajectory": (
        "swarm/rl/trajectory.py",
        ["agent_swarm.swarm.rl.trajectory.*"],
        [
            "tests/trajectory/test_trajectory_details.py",
            "tests/trajectory/test_trajectory_model.py",
            "tests/trajectory/test_export_formats.py",
            "tests/rewards/test_reward_exports.py",
        ],
    ),
}


def _prepare(name: str, fresh: bool = False) -> Path:
    target, _, tests = MODULES[name]
    work = SCRATCH / name
    if fresh:
        shutil.rmtree(work, ignore_errors=True)
    if (work / "mutants").exists():
        return work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    for f in files:
        if (ROOT / f).is_file() and not (ROOT / f).is_symlink():
            (work / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, work / f)
            if f.split("/")[0] in SOURCES:  # also as a real file of the one package the tests import
                (work / PACKAGE / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / f, work / PACKAGE / f)
    config = "\n".join(
        [
            "",
            "[tool.mutmut]",
            f"source_paths = {json.dumps([PACKAGE])}",
            f"only_mutate = {json.dumps([f'{PACKAGE}/{target}'])}",
            f"pytest_add_cli_args_test_selection = {json.dumps(tests)}",
            'pytest_add_cli_args = ["-p", "no:randomly", "-p", "no:cacheprovider", "-x", "-q"]',
            "",
        ]
    )
    with (work / "pyproject.toml").open("a", encoding="utf-8") as out:
        out.write(config)
    _undecorate(work / PACKAGE / target)
    return work


def _undecorate(path: Path) -> None:
    """Rewrite ``@REGISTRY.register(...) def f`` as ``def f`` then ``f = REGISTRY.register(...)(f)`` in the
    scratch copy: the same module (the decorator runs once, on the same function), but mutmut skips
    decorated functions, and the registered ones are the schedules, advantages, reward forms and verifiers
    themselves. Top-level functions with one call decorator only (``@cache``, ``@property`` and pydantic
    validators stay as they are, unmutated)."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines(keepends=True)
    edits = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and len(node.decorator_list) == 1:
            deco = node.decorator_list[0]
            if isinstance(deco, ast.Call) and deco.lineno == deco.end_lineno:
                edits.append((deco.lineno, node.end_lineno or node.lineno, ast.unparse(deco), node.name))
    for deco_line, end, call, name in sorted(edits, reverse=True):
        lines.insert(end, f"\n\n{name} = {call}({name})\n")
        del lines[deco_line - 1]
    path.write_text("".join(lines), encoding="utf-8")


def _mutmut(work: Path, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """``mutmut ARGS`` in ``work``; on ``timeout`` its whole process group (the forked mutant runs too)
    is killed and ``TimeoutExpired`` raised. ``SWARM_MUTMUT_LIB``: where mutmut is installed, if not here."""
    env = {**os.environ, "PYTHONPATH": os.environ.get("SWARM_MUTMUT_LIB", "")}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from mutmut.__main__ import cli; cli()", *args],
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


def _matcher(patterns: list[str]) -> re.Pattern[str]:
    return re.compile("|".join("^" + re.escape(p).replace(r"\*", ".*") + "$" for p in patterns))


def _statuses(work: Path, patterns: list[str]) -> dict[str, str]:
    out = _mutmut(work, "results", "--all", "true").stdout
    wanted = _matcher(patterns)
    statuses = {}
    for line in out.splitlines():
        if ":" not in line:
            continue
        mutant, status = (x.strip() for x in line.rsplit(":", 1))
        if wanted.match(mutant):
            statuses[mutant] = status
    return statuses


def _chunk(name: str, work: Path, todo: list[str], minutes: float, children: int) -> dict[str, Any]:
    """One mutmut run over ``todo`` (patterns or names) of at most ``minutes``; its time and load."""
    chunk: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    chunk["load_before"] = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else None
    t0 = time.monotonic()
    try:
        proc = _mutmut(work, "run", "--max-children", str(children), *todo, timeout=minutes * 60)
        print(proc.stdout[-1500:], proc.stderr[-1500:], sep="\n")
        chunk["exit"] = proc.returncode
    except subprocess.TimeoutExpired:
        print(f"{name}: stopped after {minutes:.1f} min; run again to go on")
        chunk["exit"] = "stopped"
    chunk["seconds"] = round(time.monotonic() - t0, 1)
    chunk["load_after"] = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else None
    chunks = json.loads((work / "chunks.json").read_text()) if (work / "chunks.json").exists() else []
    (work / "chunks.json").write_text(json.dumps([*chunks, chunk]))
    return chunk


def run(name: str, minutes: float, *, fresh: bool = False, children: int = 2) -> None:
    """Run (or go on with) one module's mutants for at most ``minutes``; save the results when all are done."""
    patterns = MODULES[name][1]
    started = (SCRATCH / name / "mutants").exists() and not fresh
    work = _prepare(name, fresh)
    # mutmut reruns every mutant named on its command line: go on with the pending ones by name
    todo = [m for m, s in _statuses(work, patterns).items() if s in PENDING] if started else patterns
    if todo:
        _chunk(name, work, todo, minutes, children)
    statuses = _statuses(work, patterns)
    pending = [m for m, s in statuses.items() if s in PENDING]
    print(f"{name}: {len(statuses)} mutants, {len(pending)} not checked yet")
    if statuses and not pending:
        _save(name, work, statuses)


def _save(name: str, work: Path, statuses: dict[str, str]) -> None:
    target, patterns, tests = MODULES[name]
    survivors = {m: _mutmut(work, "show", m).stdout for m, s in statuses.items() if s not in CAUGHT}
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", target, *tests], cwd=ROOT, capture_output=True, text=True
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    data = {
        "module": target,
        "mutants": patterns,
        "tests": tests,
        "command": f"python bench/mutation.py {name} --fresh  (then repeat without --fresh until done)",
        "tool": "mutmut 3.8.1",
        "commit": commit,
        "uncommitted_changes": dirty.stdout.split("\n") if dirty.stdout else [],
        "chunks": json.loads((work / "chunks.json").read_text()) if (work / "chunks.json").exists() else [],
        "statuses": dict(sorted(statuses.items())),
        "survivor_diffs": survivors,
    }
    path = RESULTS / f"{name}.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
    print(f"{name}: done -> {path.relative_to(ROOT)}")


def _diff_lines(diff: str) -> list[str]:
    """The changed lines of a mutant's diff (what an equivalence judgement is about)."""
    return [ln for ln in diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]


def _equivalent(data: dict[str, Any]) -> dict[str, str]:
    """Survivors of ``data`` judged equivalent whose recorded diff is still theirs: mutant -> why."""
    judged = json.loads(EQUIVALENT.read_text(encoding="utf-8")) if EQUIVALENT.exists() else {}
    # mutant names before the move under agent_swarm (results and judgements written then) match too
    diffs = {m.removeprefix(f"{PACKAGE}."): (m, d) for m, d in data["survivor_diffs"].items()}
    out = {}
    for mutant, entry in judged.get(data["module"], {}).items():
        name, diff = diffs.get(mutant.removeprefix(f"{PACKAGE}."), (mutant, None))
        if diff is not None and _diff_lines(diff) == entry["diff"]:
            out[name] = entry["why"]
    return out


def table() -> list[dict[str, Any]]:
    """Per module: mutants, caught, survived, equivalent (excluded), kill rate over the others."""
    rows = []
    for path in sorted(RESULTS.glob("*.json.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            data = json.load(f)
        st = data["statuses"]
        equivalent = _equivalent(data)
        caught = sum(1 for s in st.values() if s in CAUGHT)
        judged = len(st) - len(equivalent)
        counts = {s: n for s in sorted(set(st.values())) if (n := list(st.values()).count(s))}
        rows.append(
            {
                "name": path.name.removesuffix(".json.gz"),
                "module": data["module"],
                "mutants": len(st),
                "statuses": counts,
                "equivalent": len(equivalent),
                "not_killed": len(st) - caught - len(equivalent),
                "kill_rate": round(caught / judged, 3) if judged else None,
                "commit": data["commit"][:10],
                "minutes": round(sum(c["seconds"] for c in data.get("chunks", [])) / 60, 1),
            }
        )
    return rows


def markdown() -> str:
    lines = [
        "| module | mutants | killed | timeout | equivalent | not killed | kill rate | minutes | commit |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in table():
        st = r["statuses"]
        rate = f"{100 * r['kill_rate']:.1f} %" if r["kill_rate"] is not None else "-"
        lines.append(
            f"| `{r['module']}` | {r['mutants']} | {st.get('killed', 0)} | {st.get('timeout', 0)} | "
            f"{r['equivalent']} | {r['not_killed']} | {rate} | {r['minutes']} | `{r['commit']}` |"
        )
    return "\n".join(lines)


# -- CI: only the functions a change touched -------------------------------------------------------------


def _changed(target: str, ref: str) -> tuple[set[str], set[str]]:
    """What changed in ``target`` since ``ref``: mutmut's names (``x_f``, ``xǁClassǁm``) of the top-level
    functions and methods holding a changed line, and the changed lines' text (stripped)."""
    diff = subprocess.run(
        ["git", "diff", "--unified=0", ref, "--", target], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    lines: set[int] = set()
    for m in re.finditer(r"^@@ -\S+ \+(\d+)(?:,(\d+))? @@", diff, re.MULTILINE):
        start, count = int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1)
        lines.update(range(start, start + max(count, 1)))
    texts = {ln[1:].strip() for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")}
    if not lines:
        return set(), set()
    tree = ast.parse((ROOT / target).read_text(encoding="utf-8"))
    funcs = set()
    for node in tree.body:
        found: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str | None]] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found = [(node, None)]
        if isinstance(node, ast.ClassDef):
            found = [(n, node.name) for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        for fn, cls in found:
            if lines & set(range(fn.lineno, (fn.end_lineno or fn.lineno) + 1)):
                funcs.add(f"xǁ{cls}ǁ{fn.name}" if cls else f"x_{fn.name}")
    return funcs, texts - {""}


def changed(ref: str, minutes: float, children: int) -> int:
    """Mutate the functions of the listed modules that changed since ``ref``; 1 if a mutant of a changed
    line survives and is not judged equivalent, else 0. Survivors on unchanged lines of those functions
    are listed, not counted; mutants the time limit left unchecked are listed too."""
    failed = False
    deadline = time.monotonic() + minutes * 60
    for name, (target, patterns, _) in MODULES.items():
        module = f"{PACKAGE}." + target.removesuffix(".py").replace("/", ".")
        funcs, texts = _changed(target, ref)
        wanted = _matcher(patterns)
        todo = [f"{module}.{f}__mutmut_*" for f in sorted(funcs) if wanted.match(f"{module}.{f}__mutmut_1")]
        left = (deadline - time.monotonic()) / 60
        if not todo or left < 0.5:
            print(f"{name}: {len(todo)} changed function(s)" + (" left unchecked: no time left" if todo else ""))
            continue
        work = _prepare(name, fresh=True)
        if _chunk(name, work, todo, left, children)["exit"] not in (0, "stopped"):
            print(f"{name}: mutmut failed (its output is above): the changed functions were not tested")
            failed = True
            continue
        statuses = _statuses(work, todo)
        missed = [m for m, s in statuses.items() if s not in CAUGHT and s not in PENDING]
        data: dict[str, Any] = {
            "module": target,
            "survivor_diffs": {m: _mutmut(work, "show", m).stdout for m in missed},
        }
        equivalent = _equivalent(data)
        missed = [m for m in missed if m not in equivalent]
        on_changed = [
            m
            for m in missed
            if {ln[1:].strip() for ln in _diff_lines(data["survivor_diffs"][m]) if ln[0] == "-"} & texts
        ]
        unchecked = sum(1 for s in statuses.values() if s in PENDING)
        print(
            f"{name}: {len(statuses)} mutants of {len(todo)} changed function(s): {len(on_changed)} on changed "
            f"lines not killed, {len(missed) - len(on_changed)} elsewhere in them, {unchecked} unchecked"
        )
        for m in missed:
            where = "CHANGED LINE" if m in on_changed else "unchanged line"
            diff = "\n".join("    " + ln for ln in _diff_lines(data["survivor_diffs"][m]))
            print(f"  {m} ({statuses[m]}, {where}):\n{diff}")
        failed = failed or bool(on_changed)
    return 1 if failed else 0


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("module", nargs="?", choices=sorted(MODULES))
    p.add_argument("--minutes", type=float, default=9.0, help="stop after this long (results so far are kept)")
    p.add_argument("--fresh", action="store_true", help="start the module over from this checkout")
    p.add_argument("--children", type=int, default=2, help="mutants tested at once")
    p.add_argument("--table", action="store_true", help="print the kill rates of the committed results (JSON lines)")
    p.add_argument("--markdown", action="store_true", help="print them as bench/README.md's table")
    p.add_argument("--changed", metavar="REF", help="mutate only the functions changed since this git ref")
    args = p.parse_args()
    if args.changed:
        sys.exit(changed(args.changed, args.minutes, args.children))
    if args.markdown:
        print(markdown())
        return
    if args.table or args.module is None:
        for row in table():
            print(json.dumps(row))
        return
    run(args.module, args.minutes, fresh=args.fresh, children=args.children)


if __name__ == "__main__":
    main()
