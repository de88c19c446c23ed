# mypy: ignore-errors
# ruff: noqa: F821 - `enc` is defined by _harness_wire.py, which code.py prepends to this program
# (a program run inside the sandbox with the standard library only; checked by its tests, not typed)
"""The answer's process for the code verifier (stdlib only; runs in the sandbox, untrusted).

Started by the test harness as ``python -I -c <this> FD`` with one end of a socket pair as its only
extra descriptor. It loads the answer (and the task's setup code) and then serves requests — call this
function, read that attribute — answering with plain data or a handle. Everything it sends is treated
as untrusted by the harness: a forged reply can only be a wrong value, never a passed test.
"""

import builtins
import json
import socket
import sys
import traceback

_objects: dict = {}
_ids: dict = {}
_BUILTIN_EXC = {n: o for n, o in vars(builtins).items() if isinstance(o, type) and issubclass(o, BaseException)}


def _handle(obj):
    key = id(obj)
    if key not in _ids:
        _ids[key] = len(_objects) + 1
        _objects[_ids[key]] = obj
    kind = "object"
    if isinstance(obj, type):
        kind = "exception_class" if issubclass(obj, BaseException) else "class"
    elif callable(obj):
        kind = "callable"
    try:
        text = repr(obj)[:200]
    except Exception:
        text = "<unrepresentable>"
    base = ""
    if kind == "exception_class":
        base = next((c.__name__ for c in obj.__mro__ if _BUILTIN_EXC.get(c.__name__) is c), "Exception")
    return {
        "h": _ids[key],
        "r": text,
        "k": kind,
        "n": getattr(obj, "__name__", "") if kind != "object" else "",
        "base": base,
    }


def _not_plain(v, depth):
    if type(v).__module__ == "numpy" and hasattr(v, "tolist"):
        return enc(v.tolist(), _not_plain, depth + 1)
    return _handle(v)


def send(v):
    return enc(v, _not_plain)


def dec(v):
    if isinstance(v, list):
        return [dec(x) for x in v]
    if not isinstance(v, dict):
        return v
    if "h" in v:
        return _objects[v["h"]]
    if "bi" in v:
        return getattr(builtins, v["bi"])
    if "t" in v:
        return tuple(dec(x) for x in v["t"])
    if "d" in v:
        return {dec(k): dec(x) for k, x in v["d"]}
    if "s" in v:
        return {dec(x) for x in v["s"]}
    if "fs" in v:
        return frozenset(dec(x) for x in v["fs"])
    if "b" in v:
        return bytes.fromhex(v["b"])
    if "c" in v:
        return complex(*v["c"])
    if "f" in v:
        return float(v["f"])
    raise ValueError(f"cannot decode {v!r}")


def _error(exc):
    cls = type(exc)
    base = next((c.__name__ for c in cls.__mro__ if _BUILTIN_EXC.get(c.__name__) is c), "Exception")
    return {"err": [base, str(exc)[:2000], _handle(cls)["h"], cls.__name__]}


def serve(sock, ns):
    f = sock.makefile("rwb")
    for line in f:
        req = json.loads(line)
        op = req["op"]
        try:
            if op == "names":
                out = send({k: v for k, v in ns.items() if not k.startswith("__")})
            else:
                target = _objects[req["h"]] if "h" in req else None
                args = [dec(a) for a in req.get("args", [])]
                kwargs = {k: dec(x) for k, x in req.get("kw", [])}
                if op == "call":
                    out = send(target(*args, **kwargs))
                elif op == "getattr":
                    out = send(getattr(target, req["name"]))
                elif op == "setattr":
                    setattr(target, req["name"], args[0])
                    out = None
                elif op == "dunder":
                    method = getattr(type(target), req["name"], None)
                    if method is None:  # as Python itself reports an unsupported operation
                        raise TypeError(f"{type(target).__name__!r} object does not support {req['name']}")
                    out = send(method(target, *args))
                elif op == "isinstance":
                    out = isinstance(args[0], target)
                elif op == "next":
                    out = send(next(target))
                else:
                    raise ValueError(f"unknown request {op!r}")
            reply = {"ok": out}
        except BaseException as exc:  # the answer's failures are the test's business
            reply = _error(exc)
        f.write((json.dumps(reply) + "\n").encode())
        f.flush()


def main():
    sock = socket.socket(fileno=int(sys.argv[1]))
    f = sock.makefile("rb")
    load = json.loads(f.readline())
    ns = {"__name__": "__answer__"}
    try:
        exec(compile(load["answer"], "<answer>", "exec"), ns)
        if load["setup"]:
            exec(compile(load["setup"], "<setup>", "exec"), ns)
        status = {"loaded": True}
    except BaseException as exc:
        tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
        status = {"loaded": False, "error": tb[:500]}
    sock.sendall((json.dumps(status) + "\n").encode())
    if status["loaded"]:
        serve(sock, ns)


if __name__ == "__main__":
    main()
