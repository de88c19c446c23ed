"""Code verifier: run the answer's code against unit tests in the kernel sandbox.

The answer's code (the last fenced ``python`` block, else the last fenced block, else the whole
answer) and the tests run in one sandbox but in two processes. The tests run in the harness
(``_harness_tests.py``), which reads them from its standard input and reports each result on a
channel (file descriptor 3) that the answer's process never gets; the answer is loaded in a process of
its own (``_harness_answer.py``) that the harness talks to over a socket. The answer's functions and
classes reach the tests as proxies; what they return comes back as plain data, so the tests' own
comparisons decide — an answer cannot read or write the harness, report passes, or hand back an object
that claims to equal anything. Tests are either a list of snippets (each one case, e.g.
``"assert add(2, 2) == 4"``) or Python source defining ``test_*`` functions (run in definition order).
``r_perf`` is the pass fraction (or 0/1 with ``all_or_nothing``); ``passed`` is all-pass.

What crosses to the answer: plain data (numbers, strings, bytes, lists, tuples, dicts, sets), builtins
(``len``, ``str.lower`` is not one: pass ``str``) and the answer's own objects; a test that passes a
lambda or its own object to the answer fails with a clear message. Output the answer prints goes to
the sandbox's stderr (kept in the verdict for debugging). Results stream as each test ends: a run killed
by a limit keeps the tests that had finished and counts the rest as failed, with the sandbox status as
the reason.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from agent_swarm.swarm.verifiers.registry import Verdict, VerifierArgs, VerifierContext, register_verifier

__all__ = ["CodeArgs", "extract_code"]

_HERE = Path(__file__).parent
_WIRE = (_HERE / "_harness_wire.py").read_text(encoding="utf-8")
_HARNESS = _WIRE + (_HERE / "_harness_tests.py").read_text(encoding="utf-8")
_RUNNER = _WIRE + (_HERE / "_harness_answer.py").read_text(encoding="utf-8")


def extract_code(text: str) -> str:
    """The code in an answer: the last ```python block, else the last fenced block, else the text."""
    blocks = re.findall(r"```([a-zA-Z0-9_+-]*)[^\n]*\n(.*?)```", text, re.DOTALL)
    py = [body for lang, body in blocks if lang.lower() in ("python", "py", "python3")]
    if py:
        return str(py[-1])
    if blocks:
        return str(blocks[-1][1])
    return text


class CodeArgs(VerifierArgs):
    tests: str | list[str] = Field(description="test_* functions as source, or a list of assert snippets")
    setup: str = Field("", description="code run after the answer and before the tests (fixtures, imports)")
    extract: Literal["auto", "none"] = "auto"
    all_or_nothing: bool = False
    cpu_s: float = Field(10.0, gt=0)
    wall_s: float = Field(30.0, gt=0)
    memory_mb: int = Field(512, ge=64)


def _inputs(answer: str, args: CodeArgs) -> str:
    mode = "snippets" if isinstance(args.tests, list) else "functions"
    return json.dumps({"answer": answer, "setup": args.setup, "tests": args.tests, "mode": mode, "runner": _RUNNER})


def _parse(channel: str) -> list[dict[str, Any]]:
    events = []
    for line in channel.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


@register_verifier("code", CodeArgs)
async def code_verifier(answer: str, args: CodeArgs, ctx: VerifierContext) -> Verdict:
    """Unit tests in the sandbox: pass fraction (all-pass is ``passed``)."""
    try:
        from agent_swarm.swarm.sandbox import SandboxLimits, run_python
    except ImportError as exc:  # pragma: no cover - the sandbox ships with the kernel
        return Verdict(score=0.0, error=f"code verifier needs agent_swarm.swarm.sandbox: {exc}")
    if isinstance(args.tests, list) and not args.tests:
        return Verdict(score=0.0, error="code verifier got an empty list of tests")
    code = extract_code(answer) if args.extract == "auto" else answer
    limits = SandboxLimits(cpu_s=args.cpu_s, wall_s=args.wall_s, memory_mb=args.memory_mb)
    stdin = _inputs(code, args)
    if ctx.workspace is not None:
        ctx.workspace.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=ctx.workspace, prefix="verify-") as tmp:
            result = await run_python(_HARNESS, workspace=Path(tmp), limits=limits, stdin=stdin, channel=True)
    else:
        with tempfile.TemporaryDirectory(prefix="swarm-verify-") as tmp:
            result = await run_python(_HARNESS, workspace=Path(tmp), limits=limits, stdin=stdin, channel=True)
    events = _parse(result.channel or "")
    sandbox = {
        "status": result.status,
        "exit_code": result.exit_code,
        "duration_s": result.duration_s,
        "network_isolated": result.network_isolated,
        "stderr": result.stderr[-2000:],
    }
    load = next((e for e in events if e.get("event") == "load_error"), None)
    if load is not None:
        return Verdict(score=0.0, details={"load_error": load["error"], "passed_tests": 0, "sandbox": sandbox})
    plan = next((e for e in events if e.get("event") == "plan"), None)
    if plan is None:
        # The harness never got as far as listing the tests: the answer's import-time code was killed.
        return Verdict(
            score=0.0, details={"load_error": f"sandbox {result.status} before tests ran", "sandbox": sandbox}
        )
    names = [str(n) for n in plan.get("tests") or []]
    if not names:
        return Verdict(score=0.0, error="the tests define no test_* functions", details={"sandbox": sandbox})
    results = {str(e.get("name")): e for e in events if e.get("event") == "result"}
    cases: list[dict[str, Any]] = []
    for name in names:
        r = results.get(name)
        if r is None:
            cases.append({"name": name, "ok": False, "error": f"not finished (sandbox {result.status})"})
        else:
            cases.append(
                {"name": name, "ok": r.get("ok") is True, **({"error": str(r["error"])} if "error" in r else {})}
            )
    n_ok = sum(bool(c["ok"]) for c in cases)
    passed = n_ok == len(cases)
    score = float(passed) if args.all_or_nothing else n_ok / len(cases)
    return Verdict(
        score=score,
        passed=passed,
        details={"passed_tests": n_ok, "total_tests": len(cases), "tests": cases, "sandbox": sandbox},
    )
