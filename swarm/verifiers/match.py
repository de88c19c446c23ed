"""Exact and numeric match with answer extraction (``\\boxed{}``, ``Answer:``, last number).

Pure functions first (:func:`extract_answer`, :func:`normalize_text`, :func:`parse_number`), then the
two registered verifiers ``exact`` and ``numeric``.
"""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import Field, field_validator

from swarm.verifiers.registry import Verdict, VerifierArgs, VerifierContext, register_verifier

__all__ = [
    "ExactArgs",
    "ExtractMode",
    "NumericArgs",
    "extract_answer",
    "extract_boxed",
    "normalize_text",
    "parse_number",
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
    """Exact match after extraction and normalisation; any of several accepted answers."""
    extracted = extract_answer(answer, args.extract)
    accepted = [args.expected] if isinstance(args.expected, str) else list(args.expected)
    if extracted is None:
        return Verdict(score=0.0, details={"extracted": None, "reason": f"no answer found ({args.extract})"})
    got = normalize_text(extracted, case_sensitive=args.case_sensitive)
    ok = any(got == normalize_text(a, case_sensitive=args.case_sensitive) for a in accepted)
    return Verdict(score=float(ok), passed=ok, details={"extracted": extracted, "normalized": got})


class NumericArgs(VerifierArgs):
    expected: float
    abs_tol: float = Field(1e-9, ge=0.0)
    rel_tol: float = Field(1e-6, ge=0.0)
    extract: ExtractMode = "auto"


@register_verifier("numeric", NumericArgs)
def numeric_match(answer: str, args: NumericArgs, ctx: VerifierContext) -> Verdict:
    """Numeric match within ``abs_tol`` or ``rel_tol`` of the expected value."""
    if args.extract == "auto":
        # A box or an "Answer:" line wins; otherwise the last number in the text.
        extracted = extract_boxed(answer) or _last_answer_line(answer) or _last_number(answer)
    else:
        extracted = extract_answer(answer, args.extract)
    value = parse_number(extracted) if extracted is not None else None
    if value is None:
        return Verdict(score=0.0, details={"extracted": extracted, "reason": "no number found"})
    ok = math.isclose(value, args.expected, rel_tol=args.rel_tol, abs_tol=args.abs_tol)
    return Verdict(
        score=float(ok),
        passed=ok,
        details={"extracted": extracted, "value": value, "error": abs(value - args.expected)},
    )
