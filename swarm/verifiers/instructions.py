"""Instruction constraints checkable by code (K2's verifiable instruction following).

Each constraint is a small tagged model with a ``check(text) -> (ok, observed)``; the ``instructions``
verifier scores the fraction satisfied (``passed`` when all are)::

    {"verifier": "instructions", "verifier_args": {"constraints": [
        {"type": "word_count", "max": 120},
        {"type": "sections", "required": ["Summary", "Risks"]},
        {"type": "bullets", "min": 3, "max": 5},
        {"type": "format", "format": "json"}]}}
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_swarm.swarm.verifiers.registry import Verdict, VerifierArgs, VerifierContext, register_verifier

__all__ = [
    "Bullets",
    "CharCount",
    "Constraint",
    "Contains",
    "Forbids",
    "Format",
    "InstructionArgs",
    "LineCount",
    "Regex",
    "Sections",
    "StartsWith",
    "WordCount",
    "check_constraints",
]


class _Range(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    min: int | None = Field(None, ge=0)
    max: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _bounds(self) -> _Range:
        if self.min is None and self.max is None:
            raise ValueError("give min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is greater than max {self.max}")
        return self

    def within(self, n: int) -> bool:
        return (self.min is None or n >= self.min) and (self.max is None or n <= self.max)


class WordCount(_Range):
    type: Literal["word_count"] = "word_count"

    def check(self, text: str) -> tuple[bool, Any]:
        n = len(re.findall(r"\S+", text))
        return self.within(n), n


class CharCount(_Range):
    type: Literal["char_count"] = "char_count"

    def check(self, text: str) -> tuple[bool, Any]:
        return self.within(len(text.strip())), len(text.strip())


class LineCount(_Range):
    """Non-empty lines."""

    type: Literal["line_count"] = "line_count"

    def check(self, text: str) -> tuple[bool, Any]:
        n = sum(1 for line in text.splitlines() if line.strip())
        return self.within(n), n


class Bullets(_Range):
    """Markdown bullet items (``-``, ``*``, ``+``, or ``1.`` when ``numbered``) at any indentation."""

    type: Literal["bullets"] = "bullets"
    numbered: bool = False

    def check(self, text: str) -> tuple[bool, Any]:
        pat = r"^\s*(?:[-*+]|\d+[.)])\s+\S" if self.numbered else r"^\s*[-*+]\s+\S"
        n = len(re.findall(pat, text, re.MULTILINE))
        return self.within(n), n


class Sections(BaseModel):
    """Required sections: a markdown heading (``#``..) or a ``**Bold**``/``Name:`` line with that title."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    type: Literal["sections"] = "sections"
    required: list[str] = Field(min_length=1)
    in_order: bool = False

    def check(self, text: str) -> tuple[bool, Any]:
        titles: list[str] = []
        for line in text.splitlines():
            m = re.match(r"^\s*(?:#{1,6}\s+(.+?)|\*\*(.+?)\*\*\s*:?|([^:\n]{1,60}):)\s*$", line)
            if m:
                titles.append(next(g for g in m.groups() if g).strip().rstrip(":").strip().casefold())
        positions = []
        missing = []
        for want in self.required:
            w = want.strip().casefold()
            pos = next((i for i, t in enumerate(titles) if t == w), None)
            if pos is None:
                missing.append(want)
            else:
                positions.append(pos)
        ok = not missing and (not self.in_order or positions == sorted(positions))
        return ok, {"missing": missing, "found": titles}


class Format(BaseModel):
    """The whole answer (or its single fenced block) is JSON, a markdown table, or a bullet list."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    type: Literal["format"] = "format"
    format: Literal["json", "markdown_table", "bullet_list"]

    def check(self, text: str) -> tuple[bool, Any]:
        body = text.strip()
        fence = re.fullmatch(r"```[a-zA-Z]*\n(.*?)\n?```", body, re.DOTALL)
        if fence:
            body = fence.group(1).strip()
        if self.format == "json":
            try:
                json.loads(body)
            except ValueError as exc:
                return False, f"not JSON: {exc}"
            return True, "json"
        lines = [line for line in body.splitlines() if line.strip()]
        if self.format == "markdown_table":
            ok = (
                len(lines) >= 2
                and all(line.strip().startswith("|") for line in lines)
                and bool(re.match(r"^\s*\|?\s*:?-{3,}", lines[1]))
            )
            return ok, f"{len(lines)} lines"
        ok = bool(lines) and all(re.match(r"^\s*(?:[-*+]|\d+[.)])\s+\S", line) for line in lines)
        return ok, f"{len(lines)} lines"


class Contains(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    type: Literal["contains"] = "contains"
    phrases: list[str] = Field(min_length=1)
    case_sensitive: bool = False

    def check(self, text: str) -> tuple[bool, Any]:
        t = text if self.case_sensitive else text.casefold()
        missing = [p for p in self.phrases if (p if self.case_sensitive else p.casefold()) not in t]
        return not missing, {"missing": missing}


class Forbids(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    type: Literal["forbids"] = "forbids"
    phrases: list[str] = Field(min_length=1)
    case_sensitive: bool = False

    def check(self, text: str) -> tuple[bool, Any]:
        t = text if self.case_sensitive else text.casefold()
        found = [p for p in self.phrases if (p if self.case_sensitive else p.casefold()) in t]
        return not found, {"found": found}


class StartsWith(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    type: Literal["starts_with", "ends_with"] = "starts_with"
    text: str = Field(min_length=1)

    def check(self, text: str) -> tuple[bool, Any]:
        t = text.strip()
        ok = t.startswith(self.text) if self.type == "starts_with" else t.endswith(self.text)
        return ok, t[: len(self.text)] if self.type == "starts_with" else t[-len(self.text) :]


class Regex(BaseModel):
    """``pattern`` must (or, with ``must_match=False``, must not) occur."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    type: Literal["regex"] = "regex"
    pattern: str
    must_match: bool = True

    @model_validator(mode="after")
    def _compiles(self) -> Regex:
        try:
            re.compile(self.pattern)
        except re.error as exc:
            raise ValueError(f"pattern {self.pattern!r} does not compile: {exc}") from None
        return self

    def check(self, text: str) -> tuple[bool, Any]:
        found = re.search(self.pattern, text, re.MULTILINE) is not None
        return found == self.must_match, found


Constraint = Annotated[
    WordCount | CharCount | LineCount | Bullets | Sections | Format | Contains | Forbids | StartsWith | Regex,
    Field(discriminator="type"),
]


def check_constraints(text: str, constraints: list[Constraint]) -> list[dict[str, Any]]:
    """One ``{"type", "ok", "observed", "constraint"}`` per constraint, in order."""
    out = []
    for c in constraints:
        ok, observed = c.check(text)
        out.append({"type": c.type, "ok": ok, "observed": observed, "constraint": c.model_dump(mode="json")})
    return out


class InstructionArgs(VerifierArgs):
    constraints: list[Constraint] = Field(min_length=1)
    all_or_nothing: bool = False


@register_verifier("instructions", InstructionArgs)
def instructions_verifier(answer: str, args: InstructionArgs, ctx: VerifierContext) -> Verdict:
    """Fraction of code-checkable instruction constraints satisfied (or 0/1 with all_or_nothing)."""
    results = check_constraints(answer, args.constraints)
    n_ok = sum(r["ok"] for r in results)
    passed = n_ok == len(results)
    score = float(passed) if args.all_or_nothing else n_ok / len(results)
    return Verdict(score=score, passed=passed, details={"satisfied": n_ok, "total": len(results), "checks": results})
