# mypy: ignore-errors
# ruff: noqa: F821 - `enc` is defined by _harness_wire.py, which code.py prepends to this program
# (a program run inside the sandbox with the standard library only; checked by its tests, not typed)
"""The test harness of the code verifier (stdlib only; runs in the sandbox as the program).

It reads the answer, the setup code and the tests from its standard input, makes itself non-dumpable
(so nothing of the same uid can trace it or open its descriptors through /proc), and starts the
answer in a process of its own that gets one socket and nothing else. The tests run here, in this
process: the answer's functions, classes and values reach them as proxies whose calls cross the
socket, and only plain data (numbers, strings, containers of them) comes back as a value — an
answer's object can never stand in for an expected value (an object that claims to equal everything
compares equal to nothing here). Results go out on file descriptor 3, which the answer never has.
"""

import ast
import builtins
import ctypes
import json
import os
import socket
import subprocess
import sys
import traceback


def emit(obj):
    os.write(3, (json.dumps(obj) + "\n").encode())  # the channel: a pipe only this process holds


class AnswerError(Exception):
    """The answer's process failed or sent something that is not a reply."""


_proxies = {}
_exc_classes = {}


class Remote:
    """A handle on an object in the answer's process."""

    __slots__ = ("_h", "_k", "_r")

    def __init__(self, h, r, k):
        object.__setattr__(self, "_h", h)
        object.__setattr__(self, "_r", r)
        object.__setattr__(self, "_k", k)

    def __repr__(self):
        return f"<answer's {self._r}>"

    def __call__(self, *args, **kwargs):
        return rpc("call", self, args, kwargs)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return rpc("getattr", self, name=name)

    def __setattr__(self, name, value):
        rpc("setattr", self, (value,), name=name)

    def __eq__(self, other):
        return rpc("dunder", self, (other,), name="__eq__") if isinstance(other, Remote) else NotImplemented

    def __ne__(self, other):
        return rpc("dunder", self, (other,), name="__ne__") if isinstance(other, Remote) else NotImplemented

    def __hash__(self):
        return hash(("remote", self._h))

    def __instancecheck__(self, obj):
        return isinstance(obj, Remote) and rpc("isinstance", self, (obj,)) is True

    def __iter__(self):
        it = rpc("dunder", self, name="__iter__")
        while True:
            try:
                yield rpc("next", it)
            except StopIteration:
                return


def _dunder(name):
    def method(self, *args):
        return rpc("dunder", self, args, name=name)

    method.__name__ = name
    return method


_FORWARDED = (
    "__len__ __getitem__ __setitem__ __delitem__ __contains__ __bool__ __lt__ __le__ __gt__ __ge__ "
    "__add__ __sub__ __mul__ __truediv__ __floordiv__ __mod__ __pow__ __neg__ __abs__ __str__ __int__ "
    "__float__ __index__ __enter__ __exit__"
)
for _name in _FORWARDED.split():
    setattr(Remote, _name, _dunder(_name))


def _local_exception(h, base, name):
    if h not in _exc_classes:
        parent = getattr(builtins, base, Exception)
        if not (isinstance(parent, type) and issubclass(parent, BaseException)):
            parent = Exception
        _exc_classes[h] = type(name or "AnswerException", (parent,), {"__module__": "__answer__"})
    return _exc_classes[h]


def _not_plain(v, depth):
    if isinstance(v, Remote):
        return {"h": v._h}
    if getattr(builtins, getattr(v, "__name__", ""), None) is v:
        return {"bi": v.__name__}
    raise TypeError(
        f"cannot pass {type(v).__name__} to the answer's code: only plain data, builtins and the "
        "answer's own objects cross to it"
    )


def send(v):
    return enc(v, _not_plain)


def _dec_handle(v):
    """A handle to an object living in the answer's process: a local proxy, or a local exception class."""
    h = v["h"]
    if type(h) is not int:
        raise AnswerError("malformed handle")
    if v.get("k") == "exception_class":
        return _local_exception(h, str(v.get("base", "Exception")), str(v.get("n", "")))
    if h not in _proxies:
        _proxies[h] = Remote(h, str(v.get("r", "object"))[:200], str(v.get("k", "object")))
    return _proxies[h]


def dec(v, depth=0):
    """Untrusted reply -> value: only plain data and handles, never code."""
    if depth > 60:
        raise AnswerError("reply nested too deeply")
    if v is None or type(v) in (bool, int, float, str):
        return v
    if type(v) is list:
        return [dec(x, depth + 1) for x in v]
    if type(v) is not dict or len(v) < 1:
        raise AnswerError("malformed reply from the answer's process")
    if "h" in v:
        return _dec_handle(v)
    key = next(iter(v))
    val = v[key]
    if key == "t" and type(val) is list:
        return tuple(dec(x, depth + 1) for x in val)
    if key == "d" and type(val) is list:
        return {dec(k, depth + 1): dec(x, depth + 1) for k, x in val}
    if key == "s" and type(val) is list:
        return {dec(x, depth + 1) for x in val}
    if key == "fs" and type(val) is list:
        return frozenset(dec(x, depth + 1) for x in val)
    if key == "b" and type(val) is str:
        return bytes.fromhex(val)
    if key == "c" and type(val) is list and len(val) == 2:
        return complex(float(val[0]), float(val[1]))
    if key == "f" and val in ("nan", "inf", "-inf"):
        return float(val)
    raise AnswerError("malformed reply from the answer's process")


class Channel:
    def __init__(self, sock):
        self.sock = sock
        self.file = sock.makefile("rwb")

    def send(self, obj):
        try:
            self.file.write((json.dumps(obj) + "\n").encode())
            self.file.flush()
        except OSError:
            raise AnswerError("the answer's process exited") from None

    def recv(self):
        try:
            line = self.file.readline(64 * 1024 * 1024)
        except OSError:
            line = b""
        if not line.endswith(b"\n"):
            raise AnswerError("the answer's process exited or stopped answering")
        try:
            return json.loads(line)
        except ValueError:
            raise AnswerError("malformed reply from the answer's process") from None


_chan = None


def rpc(op, target=None, args=(), kwargs=None, name=None):
    req = {"op": op, "args": [send(a) for a in args], "kw": [[k, send(x)] for k, x in (kwargs or {}).items()]}
    if target is not None:
        req["h"] = target._h
    if name is not None:
        req["name"] = name
    _chan.send(req)
    reply = _chan.recv()
    if type(reply) is not dict:
        raise AnswerError("malformed reply from the answer's process")
    if "ok" in reply:
        return dec(reply["ok"])
    err = reply.get("err")
    if type(err) is not list or len(err) != 4:
        raise AnswerError("malformed reply from the answer's process")
    base, message, h, cls_name = err
    if base == "StopIteration" and op == "next":
        raise StopIteration
    cls = _local_exception(h, str(base), str(cls_name)) if type(h) is int else AnswerError
    raise cls(str(message))


def main():
    global _chan
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0: no ptrace, no /proc/<pid>/fd for others
    cfg = json.loads(sys.stdin.read())
    sys.stdin.close()
    mine, theirs = socket.socketpair()
    child = subprocess.Popen(
        [sys.executable, "-I", "-B", "-u", "-c", cfg["runner"], str(theirs.fileno())],
        pass_fds=(theirs.fileno(),),
        stdin=subprocess.DEVNULL,
        stdout=sys.stderr,  # what the answer prints is visible for debugging, never a result
    )
    theirs.close()
    _chan = Channel(mine)
    try:
        _chan.send({"answer": cfg["answer"], "setup": cfg["setup"]})
        status = _chan.recv()
        if not (type(status) is dict and status.get("loaded") is True):
            error = status.get("error") if type(status) is dict else None
            emit({"event": "load_error", "error": str(error or "the answer did not load")[:500]})
            return
        names = rpc("names")
    except AnswerError as exc:
        emit({"event": "load_error", "error": f"the answer's process failed while loading: {exc}"})
        return
    if type(names) is not dict:
        emit({"event": "load_error", "error": "the answer's process sent a malformed namespace"})
        return
    ns = {"__name__": "__tests__", "__builtins__": builtins}
    ns.update({k: v for k, v in names.items() if type(k) is str})
    tests = cfg["tests"]
    if cfg["mode"] == "snippets":
        cases = [(f"case_{i}", src) for i, src in enumerate(tests)]
    else:
        try:
            # Only test functions the *tests* define count (an answer defining test_x adds no case).
            fn_names = [
                n.name for n in ast.parse(tests).body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
            ]
            exec(compile(tests, "<tests>", "exec"), ns)
        except BaseException as e:
            emit({"event": "load_error", "error": "tests: " + type(e).__name__ + ": " + str(e)[:500]})
            return
        cases = [(k, ns[k]) for k in dict.fromkeys(fn_names)]
    emit({"event": "plan", "tests": [name for name, _ in cases]})
    for name, case in cases:
        try:
            if isinstance(case, str):
                exec(compile(case, "<" + name + ">", "exec"), dict(ns))
            else:
                case()
        except BaseException as e:
            tb = traceback.format_exception_only(type(e), e)[-1].strip()
            emit({"event": "result", "name": name, "ok": False, "error": tb[:500]})
        else:
            emit({"event": "result", "name": name, "ok": True})
    child.kill()


if __name__ == "__main__":
    main()
