"""A WideSearch-style table scorer: item- and row-level precision/recall/F1 and success over a table.

Reimplemented from the published scoring rules (``shared/notes/evaluation-data.md`` §1), with the LLM
parts replaced deterministically (column names and key values aligned by normalisation plus explicit
alias tables; ``llm_judge`` columns fall back to normalised exact match, reported in
``TableScore.judge_fallback_columns``), and made **strict** where WideSearch is lenient, because the
same score is the RL reward (``r_perf``) and a policy learns whatever it pays for:

* **keys are not items.** WideSearch scores every key cell of a matched row 1, so copying the given
  names into a table earned 1/(M+1). Here the items are the *looked-up* cells (every column but the
  keys); a names-only or copied-input table scores 0. (A table of keys alone scores its key cells.)
* **a value must be attributed, not offered.** A hedged response cell (``3 or 4``, ``maybe``, ``?``,
  ``A/B``; URL cells exempt), a number column cell listing three or more numbers, and a cell on which
  two response rows of the same key disagree are rejected (score 0 under every metric);
* ``in_match`` needs a non-empty response made of whole words of the target (the empty cell was a
  substring of everything); two unparseable dates match only when equal or both "no value"
  (``n/a``, ``unknown``, …), not always.

The steps, in order:

1. take the first `````markdown`` block of the response, else the lines from the first to the last
   line containing ``|``; drop separator rows; the first row is the header, unless it is data (as
   wide as the required columns, naming none of them, its key cells in the asked order a gold row's
   keys): then the table has no header and its columns are the required ones in order. With no table at all, a
   *list* answer is read (one key column only): a line naming one gold key starts that key's entry,
   whose ``label: value`` fields (``email: x``, ``number of orders: 3``) or exactly one unlabelled
   value per looked-up column in the asked order (``Ava Lopez: x, Denver, 3``) are its cells; a line
   naming several keys counts for none, and an entry for a name not in the gold (``- Mia Park: …``,
   ``customer: Mia Park``) is a predicted row matching nothing (a list dodges no precision penalty);
2. normalise column names (strip, lower-case, remove spaces), apply ``column_aliases``, else match a
   required column without ``_``/``-``, ``*`` and a parenthesised hint (``User ID``); a name still
   unmatched is aligned, where unambiguous, to the one unmatched required column it holds as whole
   words (``Company Name``); if the response's column set differs from the required one, everything
   scores 0;
3. rewrite response key values through ``key_aliases``; reject listed cells (above); preprocess every
   cell per column (``norm_str``, ``extract_number``, ``norm_date``, ``extract_time``); drop rows with
   duplicate keys on both sides (the response's disagreeing cells rejected); a response row whose
   looked-up cells all say "no value" (``n/a``, ``unknown``, ``NOT FOUND``, empty) claims nothing and is
   left out, as an omitted row is (``abstained_rows``): abstaining costs no more than leaving it out;
4. inner-join on the key columns; a looked-up cell scores the *minimum* over its column's metrics
   (``exact_match``, ``number_near``, ``date_near``, ``url_match``, ``in_match``, ``llm_judge``); a row
   scores the minimum of its looked-up cells (a row counts when all its cells are right);
5. ``P_row = TP_row/#pred``, ``R_row = TP_row/#gold``, ``P_item = TP_item/(#pred·|looked-up cols|)``,
   ``R_item = TP_item/(#gold·|looked-up cols|)``, F1 the harmonic mean; success = every one of them 1
   (every gold cell right, no extra row). ``TableScore.items`` holds each gold looked-up cell's score
   under ``"<row key>|<column>"``.

Public API for workloads: :func:`score_table` (returns :class:`TableScore`), :class:`ColumnRule`,
:func:`extract_markdown_table`; the ``table`` verifier wraps them for task files.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Literal
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.verifiers.attribution import fold, hedged
from agent_swarm.swarm.verifiers.registry import Verdict, VerifierArgs, VerifierContext, register_verifier

__all__ = [
    "CellMetric",
    "ColumnRule",
    "Preprocess",
    "TableArgs",
    "TableScore",
    "extract_markdown_table",
    "norm_column",
    "parse_date",
    "score_table",
]

Preprocess = Literal["norm_str", "extract_number", "norm_date", "extract_time"]
CellMetric = Literal["exact_match", "number_near", "date_near", "url_match", "in_match", "llm_judge"]


class ColumnRule(BaseModel):
    """How one column is compared: preprocessing (both sides), then metrics (a cell scores their min).

    ``criterion`` is the relative tolerance of ``number_near`` (default 0.1) and the day window of
    ``date_near`` (default 31).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    preprocess: tuple[Preprocess, ...] = ("norm_str",)
    metrics: tuple[CellMetric, ...] = Field(("exact_match",), min_length=1)
    criterion: float | None = Field(None, ge=0.0)


class TableScore(BaseModel):
    """Scores of one response table against the gold table (all in [0, 1])."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    success: bool = False
    row_precision: float = 0.0
    row_recall: float = 0.0
    row_f1: float = 0.0
    item_precision: float = 0.0
    item_recall: float = 0.0
    item_f1: float = 0.0
    pred_rows: int = 0
    gold_rows: int = 0
    matched_rows: int = 0
    abstained_rows: int = 0
    column_scores: dict[str, float] = Field(default_factory=dict)
    scored_columns: tuple[str, ...] = ()
    items: dict[str, float] = Field(default_factory=dict)
    judge_fallback_columns: tuple[str, ...] = ()
    error: str | None = None


# -- parsing ----------------------------------------------------------------------------------------

_SEP_CELL = re.compile(r"^:?-{1,}:?$")
_PIPE_SPLIT = re.compile(r"(?<!\\)\|")


def norm_column(name: str) -> str:
    """WideSearch's column normalisation: strip, lower-case, remove spaces."""
    return re.sub(r"\s+", "", str(name).strip().lower())


def _split_row(line: str) -> list[str]:
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|") and not s.endswith("\\|"):
        s = s[:-1]
    return [c.strip().replace("\\|", "|") for c in _PIPE_SPLIT.split(s)]


def extract_markdown_table(text: str) -> tuple[list[str], list[list[str]]] | None:
    """Header and rows of the response's table, or None when it has none.

    Takes the first `````markdown`` block (also ````md``), else the span from the first to the last
    line containing ``|``. Separator rows are dropped; short rows are padded, long rows truncated.
    """
    block = re.search(r"```(?:markdown|md)[^\n]*\n(.*?)```", text, re.DOTALL | re.IGNORECASE)
    lines = (block.group(1) if block else text).splitlines()
    idx = [i for i, line in enumerate(lines) if "|" in line]
    if not idx:
        return None
    rows = [_split_row(line) for line in lines[idx[0] : idx[-1] + 1] if "|" in line]
    rows = [r for r in rows if not all(_SEP_CELL.match(c) or not c for c in r)]
    if not rows:
        return None
    header, body = rows[0], rows[1:]
    width = len(header)
    return header, [(r + [""] * width)[:width] for r in body]


def _gold_rows(gold: str | Sequence[Mapping[str, Any]]) -> tuple[list[str], list[dict[str, str]]]:
    if isinstance(gold, str):
        parsed = extract_markdown_table(gold)
        if parsed is None:  # not markdown: CSV with a header row
            reader = list(csv.reader(io.StringIO(gold.strip())))
            if len(reader) < 1:
                raise ConfigError("gold table is empty; give a markdown table, CSV text or a list of rows")
            parsed = reader[0], [(r + [""] * len(reader[0]))[: len(reader[0])] for r in reader[1:] if r]
        header, body = parsed
        return header, [dict(zip(header, r, strict=True)) for r in body]
    columns: list[str] = []
    for row in gold:
        for k in row:
            if k not in columns:
                columns.append(str(k))
    return columns, [{str(k): "" if v is None else str(v) for k, v in row.items()} for row in gold]


# -- preprocessing and cell metrics -----------------------------------------------------------------

_NUM = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?|[-+]?\.\d+")
_DATE_FORMATS = (
    "%Y-%m-%d",
    "%Y/%m/%d",
    "%Y.%m.%d",
    "%Y%m%d",
    "%d %B %Y",
    "%B %d %Y",
    "%d %b %Y",
    "%b %d %Y",
    "%m/%d/%Y",
    "%d.%m.%Y",
    "%Y年%m月%d日",
    "%B %Y",
    "%b %Y",
    "%Y-%m",
    "%Y/%m",
    "%Y年%m月",
    "%Y",
)


def parse_date(text: str) -> date | None:
    """Parse a date in common written forms (ISO, ``5 March 2024``, ``March 5th, 2024``, ``2024年3月5日``).

    Month-only or year-only dates resolve to the first day. A deterministic stand-in for dateparser.
    """
    s = text.strip()
    if not s:
        return None
    s = re.sub(r"(\d)(st|nd|rd|th)\b", r"\1", s)
    s = re.sub(r"\s*,\s*", " ", s)
    s = re.sub(r"\s+", " ", s).strip()
    with_t = s.split("T")[0] if re.match(r"\d{4}-\d{2}-\d{2}T", s) else s
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(with_t, fmt).date()
        except ValueError:
            continue
    return None


def _preprocess(value: str, steps: Sequence[Preprocess]) -> str:
    s = str(value)
    for step in steps:
        if step == "norm_str":
            s = s.strip().lower().replace(" ", "").replace("*", "")
        elif step == "extract_number":
            m = _NUM.search(s.replace(" ", ""))
            s = m.group(0).replace(",", "") if m else "NULL"
        elif step == "extract_time":
            s = _clock_time(s)
        elif step == "norm_date":
            d = parse_date(s)
            s = d.isoformat() if d else s
    return s


_TIME = re.compile(r"(?<!\d)(\d{1,2})(?::(\d{2}))(?::(\d{2}))?\s*(am|pm|a\.m\.|p\.m\.)?(?:\s*\w{2,4})?\s*(\+\d)?", re.I)


def _clock_time(s: str) -> str:
    """The first clock time in ``s`` as ``HH:MM:SS`` (12-hour times converted, a ``+1`` next-day mark
    kept, a time zone word dropped: ``22:00:00 EST``, ``22:00`` and ``10:00 pm`` are ``22:00:00``), or
    ``NULL`` when there is none."""
    m = _TIME.search(s)
    if m is None:
        return "NULL"
    hour, minute, second = int(m[1]), int(m[2]), int(m[3] or 0)
    half = (m[4] or "").lower().replace(".", "")
    if half == "pm" and hour < 12:
        hour += 12
    elif half == "am" and hour == 12:
        hour = 0
    return f"{hour:02d}:{minute:02d}:{second:02d}{m[5] or ''}"


def _number(s: str) -> float | None:
    m = _NUM.search(s)
    if m is None:
        return None
    try:
        v = float(m.group(0).replace(",", ""))
    except ValueError:
        return None
    return v / 100 if "%" in s else v


_URL = re.compile(r"(?:[a-z][a-z0-9+.-]*://)?[^\s,;|<>\"']+\.[^\s,;|<>\"']+", re.IGNORECASE)


def _netlocs(s: str) -> set[str]:
    out = set()
    for tok in _URL.findall(s):
        parsed = urlparse(tok if "://" in tok else f"http://{tok}")
        if parsed.netloc:
            out.add(parsed.netloc.lower())
    return out


_NO_VALUE = frozenset(
    {"", "n/a", "na", "none", "unknown", "null", "nan", "-", "—", "not found", "notfound", "not in the collection"}
)
REJECTED = "\x00rejected"
"""What a hedged or listed response cell becomes: it equals no gold value under any metric."""


def _no_value(s: str) -> bool:
    return s.strip().lower() in _NO_VALUE


def _cell_score(metric: CellMetric, resp: str, gold: str, criterion: float | None) -> float:
    if resp == REJECTED:
        return 0.0
    if metric in ("exact_match", "llm_judge"):
        return float(resp.strip().lower() == gold.strip().lower())
    if metric == "number_near":
        r, t = _number(resp), _number(gold)
        if r is None or t is None:
            return float(r is None and t is None and resp.strip().lower() == gold.strip().lower())
        tol = 0.1 if criterion is None else criterion
        return float(abs(r - t) <= abs(t) * tol)
    if metric == "date_near":
        dr, dt = parse_date(resp), parse_date(gold)
        if dr is None and dt is None:  # WideSearch scores any two unparseable cells 1: only "no value" twice, or equal
            return float((_no_value(resp) and _no_value(gold)) or resp.strip().lower() == gold.strip().lower())
        if dr is None or dt is None:
            return 0.0
        days = 31 if criterion is None else criterion
        return float(abs((dr - dt).days) <= days)
    if metric == "url_match":
        nr, nt = _netlocs(resp), _netlocs(gold)
        if not nr and not nt:
            return float(resp.strip().lower() == gold.strip().lower())
        return float(nr == nt)
    if metric == "in_match":  # whole words of the target, never the empty cell (a substring of everything)
        return float(bool(resp.strip()) and fold(resp) in fold(gold))
    raise ConfigError(f"unknown cell metric {metric!r}")


def _listed(value: str, rule: ColumnRule) -> bool:
    """A response cell that offers candidates instead of a value: a hedge (``3 or 4``, ``maybe``, ``?``,
    ``A/B``), or three or more different numbers in a number column (a dump). URL cells are exempt
    from the hedge check (paths hold slashes, queries question marks)."""
    if _no_value(value):  # "n/a" is no A/B alternative
        return False
    if "url_match" not in rule.metrics and hedged(value):
        return True
    if "extract_number" in rule.preprocess or "number_near" in rule.metrics:
        return len({m.replace(",", "") for m in _NUM.findall(value.replace(" ", ""))}) >= 3
    return False


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


# -- scoring ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Spec:
    """A validated scoring request: required and key columns (normalised), rules, aliases, gold rows."""

    required: list[str]
    keys: list[str]
    rule_of: dict[str, ColumnRule]
    aliases: dict[str, str]
    gold_rows: list[dict[str, str]]
    fallback: tuple[str, ...]

    @property
    def scored(self) -> list[str]:
        """The looked-up columns whose cells are the items: every column but the keys (a table of
        keys alone scores its key cells, i.e. which rows it lists)."""
        return [c for c in self.required if c not in self.keys] or list(self.keys)

    def column_of(self, name: str) -> str:
        """A response column name as a required column: normalised, through the aliases, else a required
        column equal to it without ``_``/``-``, ``*`` and a parenthesised hint (``User ID``, ``**orders
        (how many)**`` are ``user_id``, ``orders``); else the normalised name (an extra column)."""
        n = norm_column(name)
        if n in self.aliases or n in self.required:
            return self.aliases.get(n, n)
        loose = _loose(name)
        hits = [c for c in self.required if _loose(c) == loose]
        return hits[0] if len(hits) == 1 else n

    def columns_of(self, header: Sequence[str]) -> list[str]:
        """A response header as required columns: each name by :meth:`column_of`; then, as WideSearch's
        column alignment would, a name left over that holds exactly one unmatched required column as
        whole words (``Company Name``, ``Flagship Product``), where no other left-over name holds it. A
        name holding two required columns (``CEO / Flagship``) or none (``Name`` for ``company``) stays
        an extra column."""
        names = [self.column_of(h) for h in header]
        left = [i for i, n in enumerate(names) if n not in self.required]
        free = [c for c in self.required if c not in names]
        holds = {i: [c for c in free if _holds_words(header[i], c)] for i in left}
        for i in left:
            hit = holds[i]
            if len(hit) == 1 and sum(hit[0] in holds[j] for j in left) == 1:
                names[i] = hit[0]
        return names

    def gold_id(self, row: Mapping[str, str]) -> str:
        return " / ".join(str(row.get(k, "")) for k in self.keys)


_MD_LINK = re.compile(r"\[([^\]]*)\]\((?:mailto:)?([^)]*)\)")


def _unwrap(cell: str, *, url: bool = False) -> str:
    """A response cell without markdown dressing: ``[text](target)`` → text (the target in a URL
    column), backticks, ``<…>`` around it."""
    s = _MD_LINK.sub(r"\2" if url else r"\1", cell).replace("`", "").strip()
    return s[1:-1].strip() if s.startswith("<") and s.endswith(">") else s


def _loose(name: str) -> str:
    return re.sub(r"[\s_\-*`]+", "", re.sub(r"\(.*?\)", "", str(name)).lower())


def _holds_words(name: str, column: str) -> bool:
    """Whether ``name``'s words hold the required ``column`` as a run of whole words (``Company Name``
    holds ``company``, ``Year Founded`` holds ``yearfounded``; ``CEOs`` does not hold ``ceo``)."""
    words = re.findall(r"[a-z0-9]+", re.sub(r"\(.*?\)", "", str(name)).lower())
    target = column.replace("_", "").replace("-", "")
    return any("".join(words[a:b]) == target for a in range(len(words)) for b in range(a + 1, len(words) + 1))


def _check_spec(required: list[str], keys: list[str], rules: Mapping[str, ColumnRule]) -> None:
    """Bad scorer arguments (the task author's mistake) raise :class:`ConfigError`."""
    if not keys:
        raise ConfigError("key_columns must name at least one column (the table's primary key)")
    missing_keys = [k for k in keys if k not in required]
    if missing_keys:
        raise ConfigError(f"key columns {missing_keys} are not among the required columns {required}")
    unknown_rules = sorted(set(rules) - set(required))
    if unknown_rules:
        raise ConfigError(f"rules given for columns {unknown_rules} that are not required: {required}")


def _spec(
    gold: str | Sequence[Mapping[str, Any]],
    key_columns: Sequence[str],
    columns: Sequence[str] | None,
    rules: Mapping[str, ColumnRule] | None,
    column_aliases: Mapping[str, str] | None,
) -> _Spec:
    gold_header, gold_dicts = _gold_rows(gold)
    required = [norm_column(c) for c in (columns or gold_header)]
    keys = [norm_column(k) for k in key_columns]
    norm_rules = {norm_column(k): v for k, v in (rules or {}).items()}
    _check_spec(required, keys, norm_rules)
    rule_of = {c: norm_rules.get(c, ColumnRule()) for c in required}
    gold_rows = [{norm_column(k): v for k, v in row.items()} for row in gold_dicts]
    gold_missing = [c for c in required if gold_rows and c not in gold_rows[0]]
    if gold_missing or not gold_rows:
        raise ConfigError(f"gold table lacks rows or required columns {gold_missing}")
    return _Spec(
        required=required,
        keys=keys,
        rule_of=rule_of,
        aliases={norm_column(a): norm_column(c) for a, c in (column_aliases or {}).items()},
        gold_rows=gold_rows,
        fallback=tuple(c for c in required if "llm_judge" in rule_of[c].metrics),
    )


def _label_column(label: str, spec: _Spec) -> str | None:
    """The looked-up column a list item's label names (``Email``, ``number of orders``), or None."""
    name = norm_column(re.sub(r"\(.*?\)", "", label)).replace("_", "")
    name = spec.aliases.get(name, name).replace("_", "")
    hits = [c for c in spec.required if c not in spec.keys and c.replace("_", "") in name]
    best = max(hits, key=len, default=None)
    return best if best is not None and sum(len(h) == len(best) for h in hits) == 1 else None


_LABELLED = re.compile(r"^\s*\**\s*([A-Za-z][\w ()/-]*?)\s*\**\s*[:=]\s*(.*)$")
_FIELD_CUT = re.compile(r"\n|;|,\s+")


def _list_cells(content: str, spec: _Spec) -> dict[str, str]:
    """The cells of one entity's text in a list answer: ``label: value`` fields, or (with no label)
    exactly one value per looked-up column, in the asked order. Conflicting labels reject the cell."""
    labelled: dict[str, str] = {}
    loose: list[str] = []
    for field in (f.strip(" *") for f in _FIELD_CUT.split(content)):
        if not field or _no_value(field) or "not found" in field.lower():
            continue
        m = _LABELLED.match(field)
        column = _label_column(m.group(1), spec) if m else None
        if m and column is not None:
            value = m.group(2).strip(" *")
            labelled[column] = value if labelled.get(column, value) == value else REJECTED
        elif not (m and norm_column(m.group(1)) in spec.keys):
            loose.append(field)
    if labelled:
        return labelled
    wanted = [c for c in spec.required if c not in spec.keys]
    return dict(zip(wanted, loose, strict=True)) if len(loose) == len(wanted) else {}


def _list_rows(text: str, spec: _Spec) -> list[dict[str, str]]:
    """Rows of an answer written as a list instead of a table (one key column only): a line naming one
    gold key starts that key's entry (the rest of the line and the lines below, up to the next key);
    a line naming several keys ends the entry and counts for none. Entries without a value are left out."""
    if len(spec.keys) != 1:
        return []
    key = spec.keys[0]
    names = [row[key] for row in spec.gold_rows]
    patterns = [re.compile(r"(?<!\w)" + r"[\W_]+".join(map(re.escape, n.split())) + r"(?!\w)", re.I) for n in names]
    entries: list[tuple[int, list[str]]] = []
    for line in text.splitlines():
        hits = [(m.end(), i) for i, p in enumerate(patterns) if (m := p.search(line))]
        current = entries[-1][0] if entries else -1
        if len(hits) > 1:
            entries.append((_NOBODY, []))
        elif hits and hits[0][1] != current:
            entries.append((hits[0][1], [line[hits[0][0] :].lstrip(" :|-–—*")]))
        elif not hits and (rest := _other_entry(line, spec)) is not None:
            entries.append((_SOMEONE_ELSE, [rest]))
        elif entries:
            entries[-1][1].append(line)
    rows = []
    for n, (i, lines) in enumerate(entries):
        cells = _list_cells("\n".join(lines), spec) if i != _NOBODY else {}
        if cells:  # an entry for a name not in the gold is a predicted row that matches none
            rows.append({key: names[i] if i >= 0 else f"{REJECTED}#{n}", **cells})
    return rows


_NOBODY, _SOMEONE_ELSE = -1, -2
_ENTRY_HEAD = re.compile(r"^\s*(?:[-*•+]|\d{1,2}[.)])\s+\**([^:*|]{2,80}?)\**\s*(?::|—|–|\s-\s)\s*(.*)$")


def _other_entry(line: str, spec: _Spec) -> str | None:
    """The rest of a line that starts another entity's entry without naming a gold key — a list item
    ``- Name: …`` whose head is no column, or ``<key column>: Name`` — else None."""
    m = _LABELLED.match(line)
    if m and spec.column_of(m.group(1)) in spec.keys:
        return ""
    m = _ENTRY_HEAD.match(line)
    if m and _label_column(m.group(1), spec) is None and spec.column_of(m.group(1)) not in spec.keys:
        return m.group(2)
    return None


def _headerless(
    header: Sequence[str], spec: _Spec, key_map: Mapping[str, Mapping[str, str]], gold_keys: Container[tuple[str, ...]]
) -> bool:
    """Whether a response table has no header row: its first row is as wide as the required columns,
    names none of them, and read in the asked order its key cells are a gold row's keys (``gold_keys``,
    prepared as :func:`_gold_by_key` keys them). Read in any other order its cells land in the wrong
    columns and score 0, as they should."""
    if len(header) != len(spec.required) or any(spec.column_of(h) in spec.required for h in header):
        return False
    first = _prep_row(spec, dict(zip(spec.required, header, strict=True)), key_map, is_resp=True)
    return tuple(first[k] for k in spec.keys) in gold_keys


def _response_table(
    response: str | Sequence[Mapping[str, Any]],
    spec: _Spec,
    key_map: Mapping[str, Mapping[str, str]],
    gold_keys: Container[tuple[str, ...]],
) -> tuple[list[str], list[dict[str, Any]]] | None:
    """(header, rows) of the response with aliased, normalised column names; ``None``: no table in the
    text (a markdown table, else a list naming the gold keys)."""
    if isinstance(response, str):
        parsed = extract_markdown_table(response)
        if parsed is None:
            rows = _list_rows(response, spec)
            return (list(spec.required), rows) if rows else None
        header, body = parsed
        if _headerless(header, spec, key_map, gold_keys):  # the first row is data, the columns in the asked order
            header, body = list(spec.required), [header, *body]
        resp_header = spec.columns_of(header)
        return resp_header, [dict(zip(resp_header, r, strict=True)) for r in body]
    resp_rows: list[dict[str, Any]] = []
    for row in response:
        cols = spec.columns_of(list(row))
        resp_rows.append({c: "" if v is None else str(v) for c, v in zip(cols, row.values(), strict=True)})
    return (list(resp_rows[0]) if resp_rows else list(spec.required)), resp_rows


def _dedup(rows: list[dict[str, str]], keys: list[str], *, conflicts: bool) -> list[dict[str, str]]:
    """One row per key, the first. With ``conflicts`` (the response), a later row of the same key that
    disagrees on a cell rejects that cell: two answers for one cell are a hedge."""
    by_key: dict[tuple[str, ...], dict[str, str]] = {}
    for r in rows:
        k = tuple(r[c] for c in keys)
        first = by_key.setdefault(k, dict(r))
        if conflicts and first is not r:
            for c, v in r.items():
                if c not in keys and v != first[c]:
                    first[c] = REJECTED
    return list(by_key.values())


def _compare(spec: _Spec, p_rows: list[dict[str, str]], g_rows: list[tuple[str, dict[str, str]]]) -> TableScore:
    """Inner join on the keys; a looked-up cell scores the minimum of its column's metrics, a row the
    minimum of its looked-up cells; P/R over predicted and gold rows (× looked-up columns for items)."""
    scored, keys = spec.scored, spec.keys
    gold_by_key = {tuple(r[c] for c in keys): (gid, r) for gid, r in g_rows}
    items = {f"{gid}|{c}": 0.0 for gid, _ in g_rows for c in scored}
    col_tp = dict.fromkeys(spec.required, 0.0)
    tp_row = tp_item = 0.0
    matched = 0
    for pr in p_rows:
        hit = gold_by_key.get(tuple(pr[c] for c in keys))
        if hit is None:
            continue
        gid, gr = hit
        matched += 1
        cells = []
        for c in scored:
            rule = spec.rule_of[c]
            s = 1.0 if c in keys else min(_cell_score(m, pr[c], gr[c], rule.criterion) for m in rule.metrics)
            items[f"{gid}|{c}"] = s
            cells.append(s)
        for c in spec.required:
            col_tp[c] += 1.0 if c in keys else items.get(f"{gid}|{c}", 0.0)
        tp_row += min(cells)
        tp_item += sum(cells)
    n_pred, n_gold, n_cols = len(p_rows), len(g_rows), len(scored)
    p_row, r_row = (tp_row / n_pred if n_pred else 0.0), tp_row / n_gold
    p_item, r_item = (tp_item / (n_pred * n_cols) if n_pred else 0.0), tp_item / (n_gold * n_cols)
    scores = (p_row, r_row, _f1(p_row, r_row), p_item, r_item, _f1(p_item, r_item))
    return TableScore(
        success=all(abs(s - 1.0) < 1e-12 for s in scores),
        row_precision=scores[0],
        row_recall=scores[1],
        row_f1=scores[2],
        item_precision=scores[3],
        item_recall=scores[4],
        item_f1=scores[5],
        pred_rows=n_pred,
        gold_rows=n_gold,
        matched_rows=matched,
        column_scores={c: col_tp[c] / n_gold for c in spec.required},
        scored_columns=tuple(scored),
        items=items,
        judge_fallback_columns=spec.fallback,
    )


def score_table(
    response: str | Sequence[Mapping[str, Any]],
    gold: str | Sequence[Mapping[str, Any]],
    *,
    key_columns: Sequence[str],
    columns: Sequence[str] | None = None,
    rules: Mapping[str, ColumnRule] | None = None,
    column_aliases: Mapping[str, str] | None = None,
    key_aliases: Mapping[str, Mapping[str, str]] | None = None,
    allow_extra_columns: bool = False,
) -> TableScore:
    """Score ``response`` (markdown text, a list answer, or a list of row dicts) against ``gold``.

    ``columns`` are the required columns (default: the gold header); ``rules`` map a column to its
    :class:`ColumnRule` (default: ``norm_str`` + ``exact_match``); ``column_aliases`` map response
    column names to gold names; ``key_aliases`` map, per key column, response spellings to gold
    spellings. Column names are compared after :func:`norm_column`. A response without a table or
    with the wrong columns scores 0 with ``error`` set; bad arguments raise :class:`ConfigError`.
    """
    spec = _spec(gold, key_columns, columns, rules, column_aliases)
    key_map = {
        norm_column(col): {_preprocess(a, ("norm_str",)): g for a, g in m.items()}
        for col, m in (key_aliases or {}).items()
    }
    gold_rows = _gold_by_key(spec)
    table = _response_table(response, spec, key_map, gold_rows)
    if table is None:
        return TableScore(gold_rows=len(spec.gold_rows), error="no markdown table found in the response")
    resp_header, resp_rows = table
    got, want = set(resp_header), set(spec.required)
    if got != want and not (allow_extra_columns and want <= got):
        return TableScore(
            gold_rows=len(spec.gold_rows),
            pred_rows=len(resp_rows),
            judge_fallback_columns=spec.fallback,
            error=f"response columns {sorted(got)} differ from the required {sorted(want)}"
            f" (missing {sorted(want - got)}, extra {sorted(got - want)})",
        )
    claims = _claims(spec, resp_rows, key_map, gold_rows)
    p_rows = _dedup(claims, spec.keys, conflicts=True)
    return _compare(spec, p_rows, list(gold_rows.values())).model_copy(
        update={"abstained_rows": len(resp_rows) - len(claims)}
    )


def _prep_row(
    spec: _Spec, row: Mapping[str, str], key_map: Mapping[str, Mapping[str, str]], *, is_resp: bool
) -> dict[str, str]:
    """A row's required cells preprocessed by their column rules. A response cell is first freed of
    markdown and mapped through ``key_map`` (key columns); a looked-up response cell that lists several
    values is :data:`REJECTED`."""
    out = {}
    for c in spec.required:
        v, rule = str(row.get(c, "")), spec.rule_of[c]
        v = _unwrap(v, url="url_match" in rule.metrics) if is_resp else v
        if is_resp and c in key_map:
            v = key_map[c].get(_preprocess(v, ("norm_str",)), v)
        listed = is_resp and c not in spec.keys and _listed(v, rule)
        out[c] = REJECTED if listed else _preprocess(v, rule.preprocess)
    return out


def _gold_by_key(spec: _Spec) -> dict[tuple[str, ...], tuple[str, dict[str, str]]]:
    """(gold id, prepared gold row) by prepared key; of duplicate gold keys the first row counts (WideSearch)."""
    g_rows: dict[tuple[str, ...], tuple[str, dict[str, str]]] = {}
    for r in spec.gold_rows:
        prepped = _prep_row(spec, r, {}, is_resp=False)
        g_rows.setdefault(tuple(prepped[c] for c in spec.keys), (spec.gold_id(r), prepped))
    return g_rows


def _says_nothing(spec: _Spec, row: Mapping[str, Any], *, raw: bool) -> bool:
    """Whether a row has no value in any looked-up (non-key) column; ``raw``: a response row as given."""
    looked_up = [c for c in spec.required if c not in spec.keys]
    return bool(looked_up) and all(_no_value(_unwrap(str(row.get(c, ""))) if raw else row[c]) for c in looked_up)


def _claims(
    spec: _Spec,
    resp_rows: list[dict[str, Any]],
    key_map: Mapping[str, Mapping[str, str]],
    gold_rows: Mapping[tuple[str, ...], tuple[str, dict[str, str]]],
) -> list[dict[str, str]]:
    """The prepared response rows that claim something: an abstaining row is left out, unless the
    gold row of its key has no value either (then it is right)."""
    return [
        r
        for r, silent in (
            (_prep_row(spec, r, key_map, is_resp=True), _says_nothing(spec, r, raw=True)) for r in resp_rows
        )
        if not silent
        or ((g := gold_rows.get(tuple(r[c] for c in spec.keys))) is not None and _says_nothing(spec, g[1], raw=False))
    ]


class TableArgs(VerifierArgs):
    """Arguments of the ``table`` verifier (see :func:`score_table`); ``score`` picks r_perf."""

    gold: str | list[dict[str, Any]]
    key_columns: list[str] = Field(min_length=1)
    columns: list[str] | None = None
    rules: dict[str, ColumnRule] = Field(default_factory=dict)
    column_aliases: dict[str, str] = Field(default_factory=dict)
    key_aliases: dict[str, dict[str, str]] = Field(default_factory=dict)
    allow_extra_columns: bool = False
    score: Literal["item_f1", "row_f1", "success"] = "item_f1"

    @field_validator("gold")
    @classmethod
    def _gold_non_empty(cls, v: str | list[dict[str, Any]]) -> str | list[dict[str, Any]]:
        if not v:
            raise ValueError("gold table must have at least one row")
        return v


@register_verifier("table", TableArgs)
def table_verifier(answer: str, args: TableArgs, ctx: VerifierContext) -> Verdict:
    """WideSearch-compatible table scoring; r_perf is item F1 by default."""
    s = score_table(
        answer,
        args.gold,
        key_columns=args.key_columns,
        columns=args.columns,
        rules=args.rules,
        column_aliases=args.column_aliases,
        key_aliases=args.key_aliases,
        allow_extra_columns=args.allow_extra_columns,
    )
    value = float(s.success) if args.score == "success" else getattr(s, args.score)
    details = s.model_dump(mode="json", exclude={"error"})  # JSON-native: records round-trip
    # A missing table is the model's failure (score 0), not a failed verification.
    return Verdict(score=value, passed=s.success, details={**details, "problem": s.error} if s.error else details)
