# mypy: ignore-errors
# (sandbox-side program text, standard library only; prepended to both harness programs by code.py)
"""The code verifier's wire format for plain data, shared by the harness and the answer's process."""


def enc(v, other, depth=0):
    """Plain data (exact types only) -> a JSON-able tagged form; anything else goes to ``other(v)``."""
    t = type(v)
    if depth > 50:
        raise TypeError("value nested too deeply to send")
    if v is None or t in (bool, int, str):
        return v
    if t is float:
        return v if v == v and v not in (float("inf"), float("-inf")) else {"f": repr(v)}
    if t is list:
        return [enc(x, other, depth + 1) for x in v]
    if t is tuple:
        return {"t": [enc(x, other, depth + 1) for x in v]}
    if t is dict:
        return {"d": [[enc(k, other, depth + 1), enc(x, other, depth + 1)] for k, x in v.items()]}
    if t in (set, frozenset):
        return {"s" if t is set else "fs": [enc(x, other, depth + 1) for x in v]}
    if t is bytes:
        return {"b": v.hex()}
    if t is complex:
        return {"c": [v.real, v.imag]}
    return other(v, depth)
