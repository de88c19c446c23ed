"""Exact and numeric match with answer extraction (``\\boxed{}``, ``Answer:``, last number).

Pure functions first (:func:`extract_answer`, :func:`normalize_text`, :func:`parse_number`), then the
registered verifiers ``exact``, ``pick`` and ``numeric``.
"""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import Field, field_validator

from agent_swarm.swarm.verifiers.attribution import hedged, segments
from agent_swarm.swarm.verifiers.registry import Verdict, VerifierArgs, VerifierContext, register_verifier

__all__ = [
    "ExactArgs",
    "ExtractMode",
    "NumericArgs",
    "PickArgs",
    "candidate_answers",
    "exact_verdict",
    "extract_answer",
    "extract_boxed",
    "normalize_text",
    "parse_number",
    "pick_verdict",
]

ExtractMode = Literal["auto", "boxed", "answer", "last_number", "none"]

_ANSWER_RE = re.compile(r"(?:^|\n)\s*(?:\*\*)?(?:final\s+)?answer(?:\*\*)?\s*[:：]\s*(?:\*\*)?(.+)", re.IGNORECASE)
_NUMBER_RE = re.compile(r"[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?%?|[-+−]?\.\d+%?")


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (nested braces allowed), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i = start + len("\\boxed{")
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j].strip()
    return None  # unbalanced: the model never closed the box


def _all_boxed(text: str) -> list[str]:
    """Contents of every closed ``\\boxed{...}``, in order."""
    out = []
    start = text.find("\\boxed{")
    while start >= 0:
        got = extract_boxed(text[: _box_end(text, start)])
        if got is not None:
            out.append(got)
        start = text.find("\\boxed{", start + 1)
    return out


def _box_end(text: str, start: int) -> int:
    """The offset just past the brace closing the box that opens at ``start`` (the end when unclosed)."""
    depth = 0
    for j in range(start + len("\\boxed"), len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return j + 1
    return len(text)


def candidate_answers(text: str, mode: ExtractMode = "auto") -> list[str]:
    """Every answer ``text`` gives under ``mode``: all boxes, all ``Answer:`` lines (``auto``: boxes
    if any, else answer lines, else the whole text). A scorer takes one only when they all agree: a
    second, different ``Answer:`` line is a hedge, not a correction to reward."""
    boxes = _all_boxed(text) if mode in ("auto", "boxed") else []
    lines = [m.strip().rstrip("*").strip() for m in _ANSWER_RE.findall(text)] if mode in ("auto", "answer") else []
    if mode == "boxed":
        return boxes
    if mode == "answer":
        return lines
    if mode == "auto":
        return boxes or lines or ([text.strip()] if text.strip() else [])
    one = extract_answer(text, mode)
    return [one] if one is not None else []


def _last_answer_line(text: str) -> str | None:
    matches = _ANSWER_RE.findall(text)
    return matches[-1].strip().rstrip("*").strip() if matches else None


def _last_number(text: str) -> str | None:
    matches = _NUMBER_RE.findall(text)
    return matches[-1] if matches else None


def extract_answer(text: str, mode: ExtractMode = "auto") -> str | None:
    """Pull the final answer out of a model response.

    ``auto`` tries ``\\boxed{}``, then the last ``Answer:`` line, then the whole (stripped) text.
    ``last_number`` returns the last number in the text. Returns None when the mode finds nothing.
    """
    if mode == "none":
        return text.strip()
    if mode == "boxed":
        return extract_boxed(text)
    if mode == "answer":
        return _last_answer_line(text)
    if mode == "last_number":
        return _last_number(text)
    return extract_boxed(text) or _last_answer_line(text) or (text.strip() or None)


def normalize_text(text: str, *, case_sensitive: bool = False) -> str:
    """Canonical form for exact match: markup and surrounding punctuation stripped, spaces collapsed."""
    s = text.strip()
    s = re.sub(r"\\text\{([^{}]*)\}", r"\1", s)
    s = s.replace("**", "").replace("`", "")
    s = s.strip().strip("$").strip()
    s = s.strip("\"'“”‘’").strip()
    s = s.rstrip(".。!！").strip()
    s = re.sub(r"\s+", " ", s)
    return s if case_sensitive else s.casefold()


def parse_number(text: str) -> float | None:
    """Parse one number: thousands separators, unicode minus, ``%`` kept as written, simple fractions."""
    s = text.strip().replace("−", "-").replace("$", "").replace("\\%", "%").strip()
    frac = re.fullmatch(r"([-+]?\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)", s)
    if frac:
        den = float(frac.group(2))
        return float(frac.group(1)) / den if den else None
    m = _NUMBER_RE.search(s)
    if m is None:
        return None
    token = m.group(0).replace(",", "").replace("−", "-").rstrip("%")
    try:
        value = float(token)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


class ExactArgs(VerifierArgs):
    expected: str | list[str] = Field(description="the gold answer, or a list of accepted answers")
    extract: ExtractMode = "auto"
    case_sensitive: bool = False

    @field_validator("expected")
    @classmethod
    def _non_empty(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, list) and not v:
            raise ValueError("expected must list at least one accepted answer")
        return v


@register_verifier("exact", ExactArgs)
def exact_match(answer: str, args: ExactArgs, ctx: VerifierContext) -> Verdict:
    """The ``exact`` verifier: :func:`exact_verdict`."""
    return exact_verdict(answer, args)


def exact_verdict(answer: str, args: ExactArgs) -> Verdict:
    """Exact match after extraction and normalisation; any of several accepted answers. An answer
    giving several different final answers (two ``Answer:`` lines, two boxes) scores 0."""
    cands = candidate_answers(answer, args.extract)
    accepted = [args.expected] if isinstance(args.expected, str) else list(args.expected)
    if not cands:
        return Verdict(score=0.0, details={"extracted": None, "reason": f"no answer found ({args.extract})"})
    distinct = {normalize_text(c, case_sensitive=args.case_sensitive) for c in cands}
    if len(distinct) > 1:
        return Verdict(score=0.0, details={"extracted": cands, "reason": "several different answers"})
    extracted = cands[-1]
    got = normalize_text(extracted, case_sensitive=args.case_sensitive)
    ok = any(got == normalize_text(a, case_sensitive=args.case_sensitive) for a in accepted)
    return Verdict(score=float(ok), passed=ok, details={"extracted": extracted, "normalized": got})


class PickArgs(VerifierArgs):
    """A deep question's answer: which candidate the looked-up values single out, and the value that does."""

    expected: str = Field(min_length=1, description="the candidate the question picks (a company, a customer)")
    value: float = Field(description="the looked-up number that picks it (a birth year, an order total)")
    others: list[str] = Field(default_factory=list, description="the other candidates (naming one too scores 0)")
    abs_tol: float = Field(0.005, ge=0.0, description="how far a stated value may be from ``value``")


@register_verifier("pick", PickArgs)
def pick_match(answer: str, args: PickArgs, ctx: VerifierContext) -> Verdict:
    """The ``pick`` verifier: :func:`pick_verdict`."""
    return pick_verdict(answer, args)


def pick_verdict(answer: str, args: PickArgs) -> Verdict:
    """The last ``ANSWER:`` line names the expected candidate and states the value that picks it, and
    no other value: ``ANSWER: Dulzo Textiles (1945)``, ``ANSWER: Dulzo Textiles, born 1945``. A name
    alone scores 0 (a guess among the candidates the task lists is right 1 time in B without a single
    look-up), and so do a wrong or second value, a hedge, another candidate named on the line, and
    several different ``ANSWER:`` lines."""
    lines = candidate_answers(answer, "answer")
    if not lines:
        return Verdict(score=0.0, details={"extracted": None, "reason": "no ANSWER: line"})
    if len({normalize_text(line) for line in lines}) > 1:
        return Verdict(score=0.0, details={"extracted": lines, "reason": "several different answers"})
    line = lines[-1]
    details: dict[str, object] = {"extracted": line}
    folded, name = normalize_text(line), normalize_text(args.expected)
    if name not in folded:
        return Verdict(score=0.0, details={**details, "reason": "does not name the expected candidate"})
    others = [o for o in map(normalize_text, args.others) if o and o not in name]  # "Ava Lopez" in "Ava Lopez Jr"
    if any(o in folded for o in others):
        return Verdict(score=0.0, details={**details, "reason": "names another candidate too"})
    rest = folded.replace(name, " ")  # the numbers besides the pick's name ("3M" keeps its 3 out)
    values = [v for v in (parse_number(n) for n in _NUMBER_RE.findall(rest)) if v is not None]
    if not values:
        return Verdict(score=0.0, details={**details, "reason": "no value: the pick is not shown to rest on a look-up"})
    if hedged(line) or any(abs(v - args.value) > args.abs_tol for v in values):
        return Verdict(score=0.0, details={**details, "values": values, "reason": "a wrong, second or hedged value"})
    return Verdict(score=1.0, passed=True, details={**details, "values": values})


class NumericArgs(VerifierArgs):
    expected: float
    abs_tol: float = Field(1e-9, ge=0.0)
    rel_tol: float = Field(1e-6, ge=0.0)
    extract: ExtractMode = "auto"


_RANGE = re.compile(r"\d\s*(?:–|—|\bto\b|-(?=\s*\d))\s*[-+]?\d|\bbetween\b")


def _offers_several(span: str) -> bool:
    """A hedge (``42 or 43``, ``maybe``, ``?``) or a range (``40-45``, ``between 40 and 45``)."""
    return hedged(span) or bool(_RANGE.search(span))


@register_verifier("numeric", NumericArgs)
def numeric_match(answer: str, args: NumericArgs, ctx: VerifierContext) -> Verdict:
    """Numeric match within ``abs_tol`` or ``rel_tol`` of the expected value. Several different boxed
    or ``Answer:`` values, a hedged or range answer (``42 or 43``, ``40-45``), and a last number that
    sits in a hedged sentence score 0."""
    if args.extract == "auto":
        # A box or an "Answer:" line wins; otherwise the last number in the text.
        spans = _all_boxed(answer) or [m.strip() for m in _ANSWER_RE.findall(answer)]
        last = _last_number(answer)
        tail = next((seg for seg in reversed(segments(answer)) if last and last in seg), "")
        extracted = spans[-1] if spans else last
        offered = spans or ([tail] if last else [])
    else:
        extracted = extract_answer(answer, args.extract)
        offered = candidate_answers(answer, args.extract) if args.extract in ("boxed", "answer") else []
    values = {parse_number(c) for c in offered}
    if len(values) > 1 or any(_offers_several(c) for c in offered):
        return Verdict(score=0.0, details={"extracted": offered, "reason": "several different answers"})
    value = parse_number(extracted) if extracted is not None else None
    if value is None:
        return Verdict(score=0.0, details={"extracted": extracted, "reason": "no number found"})
    ok = math.isclose(value, args.expected, rel_tol=args.rel_tol, abs_tol=args.abs_tol)
    return Verdict(
        score=float(ok),
        passed=ok,
        details={"extracted": extracted, "value": value, "error": abs(value - args.expected)},
    )
