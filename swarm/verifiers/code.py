"""Code verifier: run the answer's code against unit tests in the kernel sandbox.

The answer's code (the last fenced ``python`` block, else the last fenced block, else the whole
answer) is executed in a fresh namespace inside :func:`swarm.sandbox.run_python`, then each test runs
in that namespace and reports one result line. Tests are either a list of snippets (each one case,
e.g. ``"assert add(2, 2) == 4"``) or Python source defining ``test_*`` functions (run in definition
order). ``r_perf`` is the pass fraction (or 0/1 with ``all_or_nothing``); ``passed`` is all-pass.

Result lines carry a random nonce handed to the harness on stdin, so text the answer prints cannot
pose as a result. Results stream as each test ends: a run killed by a limit keeps the tests that had
finished and counts the rest as failed with the sandbox status as the reason.
"""

from __future__ import annotations

import json
import re
import secrets
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from swarm.verifiers.registry import Verdict, VerifierArgs, VerifierContext, register_verifier

__all__ = ["CodeArgs", "extract_code"]

_HARNESS = r"""
import ast, sys, json, traceback
def _main(_answer, _setup, _tests, _mode):
    _nonce = sys.stdin.readline().strip()
    _out = sys.__stdout__
    def _emit(obj):
        _out.write(_nonce + " " + json.dumps(obj) + "\n")
        _out.flush()
    ns = {"__name__": "__answer__"}
    try:
        exec(compile(_answer, "<answer>", "exec"), ns)
        if _setup:
            exec(compile(_setup, "<setup>", "exec"), ns)
    except BaseException as e:
        _emit({"event": "load_error", "error": type(e).__name__ + ": " + str(e)[:500]})
        return
    if _mode == "snippets":
        cases = [("case_%d" % i, src) for i, src in enumerate(_tests)]
    else:
        try:
            # Only test functions the *tests* define count (an answer defining test_x cannot add cases).
            names = [n.name for n in ast.parse(_tests).body
                     if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
            exec(compile(_tests, "<tests>", "exec"), ns)
        except BaseException as e:
            _emit({"event": "load_error", "error": "tests: " + type(e).__name__ + ": " + str(e)[:500]})
            return
        cases = [(k, ns[k]) for k in dict.fromkeys(names)]
    _emit({"event": "plan", "tests": [name for name, _ in cases]})
    for name, case in cases:
        try:
            if isinstance(case, str):
                exec(compile(case, "<" + name + ">", "exec"), dict(ns))
            else:
                case()
        except BaseException as e:
            tb = traceback.format_exception_only(type(e), e)[-1].strip()
            _emit({"event": "result", "name": name, "ok": False, "error": tb[:500]})
        else:
            _emit({"event": "result", "name": name, "ok": True})
_main(@ARGS@)
"""


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


def _program(answer: str, args: CodeArgs) -> str:
    mode = "snippets" if isinstance(args.tests, list) else "functions"
    call_args = ", ".join(repr(a) for a in (answer, args.setup, args.tests, mode))
    return _HARNESS.replace("@ARGS@", call_args)


def _parse(stdout: str, nonce: str) -> list[dict[str, Any]]:
    events = []
    for line in stdout.splitlines():
        if line.startswith(nonce + " "):
            try:
                events.append(json.loads(line[len(nonce) + 1 :]))
            except ValueError:
                continue
    return events


@register_verifier("code", CodeArgs)
async def code_verifier(answer: str, args: CodeArgs, ctx: VerifierContext) -> Verdict:
    """Unit tests in the sandbox: pass fraction (all-pass is ``passed``)."""
    try:
        from swarm.sandbox import SandboxLimits, run_python
    except ImportError as exc:  # pragma: no cover - the sandbox ships with the kernel
        return Verdict(score=0.0, error=f"code verifier needs swarm.sandbox: {exc}")
    if isinstance(args.tests, list) and not args.tests:
        return Verdict(score=0.0, error="code verifier got an empty list of tests")
    code = extract_code(answer) if args.extract == "auto" else answer
    nonce = secrets.token_hex(16)
    limits = SandboxLimits(cpu_s=args.cpu_s, wall_s=args.wall_s, memory_mb=args.memory_mb)
    if ctx.workspace is not None:
        ctx.workspace.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=ctx.workspace, prefix="verify-") as tmp:
            result = await run_python(_program(code, args), workspace=Path(tmp), limits=limits, stdin=nonce + "\n")
    else:
        with tempfile.TemporaryDirectory(prefix="swarm-verify-") as tmp:
            result = await run_python(_program(code, args), workspace=Path(tmp), limits=limits, stdin=nonce + "\n")
    events = _parse(result.stdout, nonce)
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
    names: list[str] = plan["tests"]
    if not names:
        return Verdict(score=0.0, error="the tests define no test_* functions", details={"sandbox": sandbox})
    results = {e["name"]: e for e in events if e.get("event") == "result"}
    cases: list[dict[str, Any]] = []
    for name in names:
        r = results.get(name)
        if r is None:
            cases.append({"name": name, "ok": False, "error": f"not finished (sandbox {result.status})"})
        else:
            cases.append({"name": name, "ok": bool(r["ok"]), **({"error": r["error"]} if "error" in r else {})})
    n_ok = sum(bool(c["ok"]) for c in cases)
    passed = n_ok == len(cases)
    score = float(passed) if args.all_or_nothing else n_ok / len(cases)
    return Verdict(
        score=score,
        passed=passed,
        details={"passed_tests": n_ok, "total_tests": len(cases), "tests": cases, "sandbox": sandbox},
    )
