"""Tolerant parsing of tool calls written as text by small models.

Small models rarely use the server's tool-call channel. They write one of:

* hermes tags: ``<tool_call>{"name": "f", "arguments": {...}}</tool_call>`` (an unclosed final tag is
  accepted, as vLLM's hermes parser does);
* fenced JSON: ````` ```json {"name": "f", "arguments": {...}} ``` ````` (an object, a list of them, or
  several objects one after another);
* a bare JSON object (or list) somewhere in the text;
* the schema-constrained action format: ``{"name": ..., "arguments": ...}``,
  ``{"tool_calls": [{"name": ..., "arguments": ...}]}`` or
  ``{"answer": "..."}`` (see :func:`action_schema`).

:func:`parse_tool_calls` returns the text left once the calls are cut out, the calls, and a
``parse_error`` when the model clearly tried to call a tool but the JSON is broken or has the wrong
shape; the agent loop feeds that error back to the model as a recoverable mistake.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from agent_swarm.swarm.backend import ToolSpec
from agent_swarm.swarm.errors import ModelOutputError
from agent_swarm.swarm.messages import ToolCall

__all__ = [
    "ParsedOutput",
    "action_grammar",
    "action_schema",
    "clean_answer",
    "constrained_answer",
    "new_call_id",
    "parse_arguments",
    "parse_tool_calls",
]

_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FENCE = re.compile(r"```[ \t]*(?:json|JSON|tool_call|tool_code)?[ \t]*\n?(.*?)```", re.DOTALL)
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class ParsedOutput:
    """What :func:`parse_tool_calls` found: remaining text, calls and the first problem (if any)."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    parse_error: str | None = None
    answer: str | None = None


def new_call_id() -> str:
    """A fresh, unique tool-call id in the OpenAI style."""
    return f"call_{uuid.uuid4().hex[:16]}"


def parse_arguments(raw: Any, name: str) -> dict[str, Any]:
    """Arguments as a dict: accepts a dict, a JSON string of an object, or ``None`` (no arguments).

    Raises :class:`~agent_swarm.swarm.errors.ModelOutputError` with a message the model can act on.
    """
    if raw is None or raw == "":
        return {}
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ModelOutputError(
                f"arguments of tool call {name!r} are not valid JSON ({exc.msg} at char {exc.pos})"
            ) from None
        if isinstance(value, dict):
            return value
        raise ModelOutputError(f"arguments of tool call {name!r} must be a JSON object, got {type(value).__name__}")
    raise ModelOutputError(f"arguments of tool call {name!r} must be a JSON object, got {type(raw).__name__}")


def _call_from_obj(obj: Any) -> ToolCall:
    """One call from a decoded object; ``ModelOutputError`` if it is not a call's shape."""
    if not isinstance(obj, dict):
        raise ModelOutputError(f"a tool call must be a JSON object, got {type(obj).__name__}")
    if "function" in obj and isinstance(obj["function"], dict):  # the OpenAI wire shape
        obj = obj["function"]
    name = obj.get("name", obj.get("tool"))
    if not isinstance(name, str) or not name.strip():
        raise ModelOutputError('a tool call needs a "name" string, e.g. {"name": "tool", "arguments": {...}}')
    raw = obj.get("arguments", obj.get("parameters", obj.get("args")))
    return ToolCall(id=new_call_id(), name=name.strip(), arguments=parse_arguments(raw, name.strip()))


def _calls_from_value(value: Any) -> list[ToolCall]:
    if isinstance(value, list):
        return [_call_from_obj(v) for v in value]
    if isinstance(value, dict) and isinstance(value.get("tool_calls"), list):
        return [_call_from_obj(v) for v in value["tool_calls"]]
    return [_call_from_obj(value)]


def _looks_like_call(value: Any, known: Collection[str] | None) -> bool:
    """Whether a bare JSON value is meant as a tool call (bare JSON may just be data in an answer)."""
    items = value if isinstance(value, list) else [value]
    if isinstance(value, dict) and isinstance(value.get("tool_calls"), list):
        return True
    if not items:
        return False
    for item in items:
        if not isinstance(item, dict):
            return False
        fn: dict[str, Any] = item["function"] if isinstance(item.get("function"), dict) else item
        name = fn.get("name", fn.get("tool"))
        if not isinstance(name, str):
            return False
        has_args = any(k in fn for k in ("arguments", "parameters", "args"))
        if not has_args and (known is None or name not in known):
            return False
    return True


def _bare_objects(text: str) -> list[tuple[int, int, Any]]:
    """Every top-level JSON object or list in ``text`` as (start, end, value)."""
    out: list[tuple[int, int, Any]] = []
    i = 0
    while i < len(text):
        if text[i] in "{[":
            try:
                value, end = _DECODER.raw_decode(text, i)
            except json.JSONDecodeError:
                i += 1
                continue
            out.append((i, end, value))
            i = end
        else:
            i += 1
    return out


def _json_values(body: str) -> tuple[list[Any], json.JSONDecodeError | None]:
    """The JSON values in ``body``, one after another with only whitespace between them (several
    calls in one ``<tool_call>`` block, a line each, as small models copy a list of calls), and the
    error where reading stopped short of the end (``None`` when all of ``body`` was read)."""
    values: list[Any] = []
    i = 0
    while True:
        while i < len(body) and body[i].isspace():
            i += 1
        if i == len(body) and values:
            return values, None
        try:
            value, i = _DECODER.raw_decode(body, i)
        except json.JSONDecodeError as exc:
            return values, exc
        values.append(value)


def _mentions_call(text: str) -> bool:
    return bool(re.search(r'"(name|tool)"\s*:', text)) and bool(re.search(r'"(arguments|parameters|args)"\s*:', text))


def parse_tool_calls(text: str, known_tools: Collection[str] | None = None, *, truncated: bool = False) -> ParsedOutput:
    """Find the tool calls in a model's text output.

    ``known_tools`` (the names offered to the model) decides whether a bare JSON object that has a
    ``name`` but no ``arguments`` is a call or just data. Tagged and fenced calls are always taken as
    calls, so a wrong name there reaches the tool layer, which reports it back to the model.
    ``truncated``: the output was cut at the token limit, so an unfinished last call is dropped (the
    calls before it stand; the caller tells the model about the cut) instead of failing the turn.
    """
    if "<tool_call>" in text:
        return _parse_tagged(text, known_tools, truncated)
    answer = _answer_object(text)
    if answer is not None:
        return answer
    calls: list[ToolCall] = []
    call_spans: list[tuple[int, int]] = []
    problem = _fenced_calls(text, known_tools, calls, call_spans)
    if problem is not None:
        return problem
    if calls:
        return ParsedOutput(_cut(text, call_spans), tuple(calls))
    for start, end, value in _bare_objects(text):
        if _looks_like_call(value, known_tools):
            try:
                calls.extend(_calls_from_value(value))
            except (ValueError, ModelOutputError) as exc:  # JSON syntax, or not a call's shape
                return ParsedOutput(text, (), f"{exc}: {_clip(text[start:end])}")
            call_spans.append((start, end))
    if calls:
        return ParsedOutput(_cut(text, call_spans), tuple(calls))
    if _mentions_call(text) and known_tools and any(f'"{n}"' in text for n in known_tools):
        return ParsedOutput(
            text,
            (),
            'the tool call is not valid JSON; write {"name": "<tool>", "arguments": {...}} '
            f"inside <tool_call></tool_call> tags: {_clip(text)}",
        )
    return ParsedOutput(text, ())


def _parse_tagged(text: str, known_tools: Collection[str] | None, truncated: bool) -> ParsedOutput:
    """1. hermes tags: unambiguous intent, so broken JSON inside is a parse error."""
    calls: list[ToolCall] = []
    matches = list(_TAG.finditer(text))
    for i, m in enumerate(matches):
        body = m.group(1).strip()
        fenced = _FENCE.fullmatch(body)
        if fenced:
            body = fenced.group(1).strip()
        cut_off = truncated and i == len(matches) - 1 and not m.group(0).rstrip().endswith("</tool_call>")
        values, broken = _json_values(body)
        if cut_off and not (calls or values):
            return ParsedOutput(text, (), f"the tool call was cut off before it was complete: {_clip(body)}")
        if broken is not None and not cut_off:
            return ParsedOutput(
                text,
                (),
                f"the JSON inside <tool_call>…</tool_call> is invalid ({broken.msg} at char {broken.pos}): "
                f"{_clip(body)}",
            )
        try:
            for value in values:
                calls.extend(_calls_from_value(value))
        except (ValueError, ModelOutputError) as exc:  # not a call's shape
            if cut_off:
                break
            return ParsedOutput(text, (), f"{exc}: {_clip(body)}")
    rest = _TAG.sub("", text).strip()
    # Calls written without tags between tagged ones (the action grammar allows both).
    spans = [(a, b) for a, b, value in _bare_objects(rest) if _looks_like_call(value, known_tools)]
    for a, b in spans:
        try:
            calls.extend(_calls_from_value(json.loads(rest[a:b])))
        except (ValueError, ModelOutputError) as exc:  # JSON syntax, or not a call's shape
            return ParsedOutput(text, (), f"{exc}: {_clip(rest[a:b])}")
    return ParsedOutput(_cut(rest, spans), tuple(calls))


def _answer_object(text: str) -> ParsedOutput | None:
    """2. the schema-constrained action object when it holds an answer and no calls."""
    stripped = text.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return None
    try:
        whole = json.loads(stripped)
    except json.JSONDecodeError:
        return None
    if isinstance(whole, dict) and "answer" in whole and "name" not in whole:
        answer = whole.get("answer")
        if isinstance(answer, str) and not (whole.get("tool_calls") or []):
            return ParsedOutput(answer, (), answer=answer)
    return None


def _fenced_calls(
    text: str, known_tools: Collection[str] | None, calls: list[ToolCall], call_spans: list[tuple[int, int]]
) -> ParsedOutput | None:
    """3. calls in fenced JSON blocks, added to ``calls``/``call_spans``; a broken one's error output."""
    for m in _FENCE.finditer(text):
        body = m.group(1).strip()
        if not body.startswith(("{", "[")):
            continue
        # Several calls one after another in one fence (a 1.5B wrote two math_gcd objects so) are a
        # list when nothing but whitespace lies between them.
        values, broken = _json_values(body)
        if broken is not None:
            if not _mentions_call(body):
                continue
            return ParsedOutput(
                text, (), f"the fenced tool-call JSON is invalid ({broken.msg} at char {broken.pos}): {_clip(body)}"
            )
        value = values[0] if len(values) == 1 else values
        if _looks_like_call(value, known_tools):
            try:
                calls.extend(_calls_from_value(value))
            except (ValueError, ModelOutputError) as exc:  # JSON syntax, or not a call's shape
                return ParsedOutput(text, (), f"{exc}: {_clip(body)}")
            call_spans.append(m.span())
    return None


def _cut(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` without the given (sorted, disjoint) spans."""
    rest, last = [], 0
    for start, end in spans:
        rest.append(text[last:start])
        last = end
    rest.append(text[last:])
    return "".join(rest).strip()


def _clip(s: str, n: int = 200) -> str:
    s = s.strip()
    return s if len(s) <= n else s[:n] + "…"


def constrained_answer(text: str) -> str:
    """The answer inside a schema-constrained ``{"answer": "..."}`` output; other text unchanged."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return text
    if isinstance(value, dict) and isinstance(value.get("answer"), str):
        return str(value["answer"])
    return text


def _closed(schema: dict[str, Any]) -> dict[str, Any]:
    """An object schema that forbids keys it does not list (grammar converters allow them by default,
    and small models then invent keys such as ``"required"`` that the tool rejects)."""
    if schema.get("type") == "object" and "additionalProperties" not in schema:
        return {**schema, "additionalProperties": False}
    return schema


def action_schema(tools: Collection[ToolSpec], *, allow_answer: bool = True, one_call: bool = False) -> dict[str, Any]:
    """A JSON schema for one action: one tool call, several tool calls, or a final answer.

    Engines with grammar-constrained decoding (llama.cpp ``response_format``, vLLM structured
    outputs) use it so a small model always writes a parseable action. A single call may be the bare
    ``{"name": ..., "arguments": ...}`` object that chat templates (Qwen's, Hermes') teach; without
    it a model trained on that format is forced off its own call syntax and mostly answers instead.
    With no tools it allows only the answer (the final turn, when tools are disabled); ``one_call``
    leaves out the list of calls (``parallel_tool_calls=False``).
    """
    call_variants = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, "arguments": _closed(t.parameters)},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for t in tools
    ]
    calls = {
        "type": "object",
        "properties": {"tool_calls": {"type": "array", "items": {"anyOf": call_variants}, "minItems": 1}},
        "required": ["tool_calls"],
        "additionalProperties": False,
    }
    answer = {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    variants = [*call_variants, *(() if one_call else (calls,))] if call_variants else []
    variants += [answer] if allow_answer or not call_variants else []
    return variants[0] if len(variants) == 1 else {"anyOf": variants}


# Free text that cannot be mistaken for the start of a call: not empty, and not opening with a tag,
# a JSON object or list, or a code fence (small models wrap calls in ```json fences).
_ANSWER_TERMINAL = r"/[^\s<{\[`](.|\n)*/"


def _lark_atom(tag: str | int) -> str:
    """A grammar atom for a tag: a token id (``<[151657]>``, the single special token the model was
    trained on) or, when the tokenizer has no such token, the literal text."""
    return f"<[{tag}]>" if isinstance(tag, int) else json.dumps(tag)


def action_grammar(
    tools: Collection[ToolSpec],
    *,
    allow_answer: bool = True,
    open_tag: str | int = "<tool_call>",
    close_tag: str | int = "</tool_call>",
    one_call: bool = False,
) -> str:
    """An llguidance (Lark) grammar for one action in the hermes format chat templates teach.

    An action is either one or more tool calls, one per line, each ``{"name": ..., "arguments":
    ...}`` valid against its tool's schema and optionally wrapped in ``<tool_call>`` tags (Qwen's and
    Hermes' templates teach the tags; Qwen2.5-Coder-0.5B writes the bare objects), or, with
    ``allow_answer``, a plain-text answer that does not start like a call. So several calls in one
    turn (a parallel stage) are as natural as one, and a final answer is clean text, never a JSON
    wrapper. With no tools only the answer is allowed (the final turn, when tools are disabled).

    ``open_tag``/``close_tag`` are token ids when the tokenizer has the tags as single tokens (pass
    them: a grammar that spells the tag out in characters forces token sequences the model never saw).
    ``one_call`` admits a single call (``parallel_tool_calls=False``): the turn ends after it.
    """
    variants = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, "arguments": _closed(t.parameters)},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for t in tools
    ]
    lines = ["%llguidance {}"]
    if not variants:
        lines.append(f"start: {_ANSWER_TERMINAL}")
        return "\n".join(lines) + "\n"
    body = variants[0] if len(variants) == 1 else {"anyOf": variants}
    lines += ["start: calls | ANSWER", f"ANSWER: {_ANSWER_TERMINAL}"] if allow_answer else ["start: calls"]
    lines += [
        'calls: call "\\n"?' if one_call else 'calls: call ("\\n" call)* "\\n"?',
        f'call: {_lark_atom(open_tag)} "\\n" body "\\n" {_lark_atom(close_tag)} | body',
        f"body: %json {json.dumps(body, ensure_ascii=False)}",
    ]
    return "\n".join(lines) + "\n"


# Chat-template markers a small model sometimes writes into its answer, continuing with an
# imagined next turn after them.
_MARKERS = re.compile(
    r"<\|im_start\|>|<\|im_end\|>|<\|endoftext\|>|<\|eot_id\|>|</?tool_response>|</?tool_call>|</?tools>"
)


def clean_answer(text: str) -> str:
    """A model's answer as clean text for the reader: a ``{"answer": ...}`` wrapper unwrapped,
    template markers at the start dropped, and everything from the first later marker on (an
    imagined next turn) cut off. Callers keep the raw output in their turn records."""
    out = text.strip()
    if out.startswith("{") and out.endswith("}"):
        try:
            value = json.loads(out)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, dict) and isinstance(value.get("answer"), str) and len(value) == 1:
            out = value["answer"].strip()
    while True:
        m = _MARKERS.match(out)
        if m is None:
            break
        out = out[m.end() :].lstrip()
        if m.group(0) == "<|im_start|>":  # a role header follows the turn marker
            out = re.sub(r"^(assistant|user|system|tool)\b\s*", "", out)
    m = _MARKERS.search(out)
    if m is not None:
        out = out[: m.start()].rstrip()
    return collapse_repeats(out)


def collapse_repeats(text: str, *, min_period: int = 8, max_period: int = 300, copies: int = 3) -> str:
    """``text`` with a degenerate loop at its end kept once: when the text ends in ``copies`` or
    more verbatim repeats of a stretch of ``min_period``-``max_period`` characters (a small model
    looping until the token cap; the last copy may be cut off), everything after the first copy is
    dropped. Linear in the loop's length for each period tried; text that does not loop is returned
    unchanged (trailing spaces stripped)."""
    t = text.rstrip()
    n = len(t)
    top = min(max_period, n // copies)
    if top < min_period:
        return t
    # Only a period p with t[n-1-p] == t[n-1] can loop: find those with rfind (C speed), shortest first.
    low, last = n - 1 - top, t[-1]
    q = t.rfind(last, low, n - min_period)
    while q != -1:
        p = n - 1 - q
        i = q - 1
        while i >= 0 and t[i] == t[i + p]:
            i -= 1
        if n - (i + 1) >= copies * p:  # t[i+1:] has period p and holds `copies` full copies
            end = i + 1 + p
            if t[end] in ".!?;":  # the copy began just after its own closing punctuation
                end += 1
            return t[:end].rstrip()
        q = t.rfind(last, low, q)
    return t
