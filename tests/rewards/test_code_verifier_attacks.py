"""Issue 18 point 8: an answer scored by the code verifier cannot forge its reward."""

from __future__ import annotations

import sys

import pytest

from agent_swarm.swarm.sandbox import isolation_available
from agent_swarm.swarm.verifiers import verify

ISOLATED, WHY_NOT = isolation_available()
pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="the sandbox targets Linux"),
    pytest.mark.skipif(not ISOLATED, reason=f"bubblewrap isolation unavailable: {WHY_NOT}"),
]
# Two impossible tests and one an honest add() passes: an honest answer scores exactly 1/3.
TESTS = ["assert False", "assert 1 == 2", "assert add(1, 1) == 2"]
ADD = "def add(a, b):\n    return a + b\n"

FRAME_FORGERY = (
    ADD
    + """
import sys
frame = sys._getframe(0)
while frame is not None:  # the attack of the issue: find the harness's reporter in a caller's frame
    for name in ('_emit', 'emit', '_report', '_chan'):
        obj = frame.f_locals.get(name) or frame.f_globals.get(name)
        if callable(obj):
            obj({'event': 'plan', 'tests': ['case_0', 'case_1', 'case_2']})
            for i in range(3):
                obj({'event': 'result', 'name': 'case_%d' % i, 'ok': True})
            import os
            os._exit(0)  # before the real tests could report
    frame = frame.f_back
"""
)
FD_FORGERY = (
    ADD
    + """
import os, json
line = (json.dumps({'event': 'result', 'name': 'case_0', 'ok': True}) + '\\n').encode()
for fd in range(3, 64):
    try:
        os.write(fd, line)
    except OSError:
        pass
for path in ('/proc/%d/fd/3' % os.getppid(), '/proc/1/fd/3'):
    try:
        with open(path, 'w') as f:
            f.write(line.decode())
    except OSError:
        pass
print(line.decode())
"""
)
ALWAYS_EQUAL = """
class Anything:
    def __eq__(self, other):
        return True
    def __bool__(self):
        return True
def add(a, b):
    return Anything()
"""
KILL_HARNESS = ADD + "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n"
PTRACE_HARNESS = (
    ADD
    + """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
assert libc.ptrace(16, os.getppid(), 0, 0) != 0, 'attached to the harness'
"""
)
EXIT_EARLY = ADD + "import os\nos._exit(0)\n"


@pytest.mark.parametrize(
    "answer",
    [FRAME_FORGERY, FD_FORGERY, PTRACE_HARNESS],
    ids=["caller-frame", "descriptors-and-proc", "ptrace"],
)
async def test_forgery_gets_no_more_than_the_honest_answer(answer: str) -> None:
    v = await verify("code", answer, {"tests": TESTS, "extract": "none"})
    assert v.score <= 1 / 3 + 1e-9, v  # writing into its own socket may cost it the honest third
    assert not any(c["ok"] for c in v.details.get("tests", []) if c["name"] in ("case_0", "case_1")), v


@pytest.mark.parametrize("answer", [ALWAYS_EQUAL, KILL_HARNESS, EXIT_EARLY], ids=["always-equal", "stop", "exit"])
async def test_answers_that_attack_the_harness_score_nothing(answer: str) -> None:
    v = await verify("code", answer, {"tests": TESTS, "extract": "none", "wall_s": 5})
    assert v.score == 0.0, v


async def test_answer_cannot_read_the_tests() -> None:
    answer = ADD + (
        "import os\n"
        "seen = []\n"
        "for p in ['/sandbox/main.py', '/proc/%d/cmdline' % os.getppid(), '/proc/%d/environ' % os.getppid()]:\n"
        "    try:\n"
        "        seen.append(open(p, 'rb').read())\n"
        "    except OSError:\n"
        "        pass\n"
        "LEAK = b'SECRET_EXPECTED_VALUE' in b''.join(seen)\n"
    )
    v = await verify("code", answer, {"tests": ["assert not LEAK, 'SECRET_EXPECTED_VALUE'"], "extract": "none"})
    assert v.score == 1.0, v


async def test_honest_answers_with_classes_exceptions_and_iterators_pass() -> None:
    answer = """
class EmptyError(LookupError):
    pass

class Stack:
    def __init__(self):
        self.items = []
    def push(self, x):
        self.items.append(x)
        return self
    def pop(self):
        if not self.items:
            raise EmptyError("empty stack")
        return self.items.pop()
    def __len__(self):
        return len(self.items)

def count(n):
    yield from range(n)

def apply(f, xs):
    return [f(x) for x in xs]
"""
    tests = """
def test_stack():
    s = Stack()
    s.push(1).push(2)
    assert len(s) == 2 and s.pop() == 2 and s.items == [1]
    assert isinstance(s, Stack)

def test_custom_exception():
    s = Stack()
    try:
        s.pop()
    except EmptyError as exc:
        assert "empty" in str(exc)
    else:
        assert False, "no EmptyError"
    try:
        Stack().pop()
    except LookupError:
        pass

def test_iterators_and_builtins():
    assert list(count(3)) == [0, 1, 2]
    assert apply(abs, [-1, 2]) == [1, 2]

def test_lambdas_do_not_cross():
    apply(lambda x: x, [1])
"""
    v = await verify("code", answer, {"tests": tests, "extract": "none"})
    oks = {c["name"]: c["ok"] for c in v.details["tests"]}
    assert oks == {
        "test_stack": True,
        "test_custom_exception": True,
        "test_iterators_and_builtins": True,
        "test_lambdas_do_not_cross": False,
    }, v.details
    err = next(c["error"] for c in v.details["tests"] if c["name"] == "test_lambdas_do_not_cross")
    assert "cannot pass function" in err
