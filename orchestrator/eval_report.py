"""Markdown reports regenerated from the raw files of ``swarm eval`` runs, and nothing else.

``swarm eval --report DIR [DIR ...]`` (or ``python -m agent_swarm.orchestrator.eval_report DIR ...``) reads each
run's ``manifest.json`` and ``episodes.jsonl.gz`` (:mod:`agent_swarm.orchestrator.eval_raw`; a directory holding
several runs is searched one level down) and prints, per workload, split and knobs:

* the header: split, seeds, tasks, runs, code commits, models and adapters with their sha256;
* one row per condition (an arm on one model and adapter): quality (the workload metric's mean over
  tasks; with repeated runs, the range of the run means), success rate, and the median and range over
  episodes of critical steps, total steps, tokens and wall time;
* paired comparisons of the conditions over the tasks both ran (:func:`agent_swarm.orchestrator.eval_stats.paired`):
  the mean difference with its bootstrap 95 % interval, wins/losses/ties, sign and Wilcoxon p-values,
  and n, marked *not a headline* under 30 tasks.

``--summary`` prints one row per run instead (:func:`render_summary`): each arm's quality and median wall
time, and the swarm against each single arm, paired over the run's tasks.

The output depends on the raw files only (the bootstrap is seeded), so a committed report can be
checked by regenerating it.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_swarm.orchestrator.eval_raw import (
    MANIFEST_FILE,
    RAW_FILE,
    RawEpisode,
    RoleTokens,
    RunManifest,
    read_manifest,
    read_raw,
)
from agent_swarm.orchestrator.eval_stats import HEADLINE_MIN_N, paired, spread
from agent_swarm.swarm.errors import ConfigError

__all__ = [
    "Condition",
    "CurvePoint",
    "RunData",
    "comparisons",
    "curve",
    "load_runs",
    "main",
    "render_curve",
    "render_report",
    "render_summary",
]

ARM_ORDER = ("swarm", "single-parallel", "single")
MIN_SAMPLES = 3
"""Episodes per task a condition needs when it samples (temperature > 0) before it may be a headline."""


@dataclass(frozen=True, slots=True)
class RunData:
    """One run directory's manifest and raw rows."""

    path: Path
    manifest: RunManifest
    rows: tuple[RawEpisode, ...]
    damaged: int


@dataclass(frozen=True, slots=True, order=True)
class Condition:
    """What a row of the report compares: an arm on one model (and adapter)."""

    arm_rank: int
    arm: str
    model: str
    adapter_sha256: str


def load_runs(paths: Sequence[Path]) -> list[RunData]:
    """The runs under ``paths`` (a run directory, or a directory of run directories), in path order."""
    dirs: list[Path] = []
    for p in paths:
        if (p / MANIFEST_FILE).is_file():
            dirs.append(p)
        elif p.is_dir() and (found := sorted(m.parent for m in p.glob(f"*/{MANIFEST_FILE}"))):
            dirs += found
        else:
            raise ConfigError(f"{p} is not a swarm eval run directory (no {MANIFEST_FILE} in it or one level down)")
    runs = []
    for d in dict.fromkeys(dirs):
        rows, bad = read_raw(d / RAW_FILE)
        unique = {r.key: r for r in rows}  # an episode written twice counts once (the last row)
        runs.append(RunData(d, read_manifest(d), tuple(unique.values()), bad + len(rows) - len(unique)))
    return runs


def _condition(row: RawEpisode) -> Condition:
    rank = ARM_ORDER.index(row.arm) if row.arm in ARM_ORDER else len(ARM_ORDER)
    return Condition(rank, row.arm, row.provenance.model, row.provenance.adapter_sha256 or "")


def _labels(conds: Sequence[Condition]) -> dict[Condition, str]:
    """Short names: the arm, plus the model and adapter where they differ within the table."""
    models = {c.model for c in conds}
    adapters = {c.adapter_sha256 for c in conds}
    out = {}
    for c in conds:
        label = c.arm
        if len(models) > 1:
            label += f" · {c.model}"
        if len(adapters) > 1:
            label += f" + adapter {c.adapter_sha256[:8]}" if c.adapter_sha256 else " (base)"
        out[c] = label
    return out


def _knobs(run: RunData) -> dict[str, Any]:
    """The run's workload knobs, defaults included (older manifests: the ones given)."""
    return run.manifest.knobs or dict(run.manifest.settings.get("knobs", {}))


def _group_key(run: RunData) -> tuple[str, str, str]:
    return (run.manifest.workload, run.manifest.split, json.dumps(_knobs(run), sort_keys=True))


def _fmt_spread(values: Sequence[float], fmt: str) -> str:
    return spread(values).format(fmt) if values else "—"


def _quality(rows: Sequence[RawEpisode]) -> str:
    """The metric's mean over the episodes; with repeats (runs or samples of the same tasks), the range
    of the repeats' means and how many tasks scored differently across repeats."""
    by_repeat: dict[tuple[str, int], list[float]] = defaultdict(list)
    by_task: dict[str, set[float]] = defaultdict(set)
    for r in rows:
        by_repeat[(r.run_id, r.sample)].append(r.metric)
        by_task[r.task_id].add(r.metric)
    mean = sum(r.metric for r in rows) / len(rows)
    if len(by_repeat) == 1:
        return f"{mean:.3f}"
    means = [sum(v) / len(v) for v in by_repeat.values()]
    differ = sum(len(v) > 1 for v in by_task.values())
    return (
        f"{mean:.3f} (repeats {min(means):.3f}–{max(means):.3f}, {len(means)} repeats; "
        f"{differ} of {len(by_task)} tasks differ)"
    )


def _header(runs: Sequence[RunData], rows: Sequence[RawEpisode]) -> list[str]:
    m = runs[0].manifest
    seeds = sorted({r.manifest.seed for r in runs})
    commits = sorted(
        {f"{(r.provenance.commit or 'unknown')[:10]}{'+dirty' if r.provenance.dirty else ''}" for r in rows}
    )
    models = sorted(
        {
            f"{r.provenance.model} (sha256 {r.provenance.model_sha256 or 'n/a'})"
            + (f", adapter sha256 {r.provenance.adapter_sha256}" if r.provenance.adapter_sha256 else "")
            for r in rows
        }
    )
    concurrent = sorted({r.concurrent_episodes for r in rows})
    damaged = sum(r.damaged for r in runs)
    lines = [
        f"## {m.workload} · {m.split} split · seeds {', '.join(map(str, seeds))}",
        "",
        f"- tasks: {len({r.task_id for r in rows})}; episodes: {len(rows)}; metric: {m.metric_name}",
        f"- knobs: {json.dumps(_knobs(runs[0]), sort_keys=True)}",
        f"- runs: {', '.join(r.manifest.run_id for r in runs)}",
        f"- code: {', '.join(commits)}",
        f"- models: {'; '.join(models)}",
        f"- episodes at once: {', '.join(map(str, concurrent))}"
        + (" (wall times share the machine)" if max(concurrent, default=1) > 1 else ""),
    ]
    if damaged:
        lines.append(f"- {damaged} damaged raw entr(y/ies) skipped")
    return [*lines, ""]


def _summary_table(by_cond: dict[Condition, list[RawEpisode]], labels: dict[Condition, str]) -> list[str]:
    lines = [
        "| arm | tasks | episodes | quality | success | fan-out | critical steps | total steps | tokens | wall s "
        "| errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for cond in sorted(by_cond):
        rows = by_cond[cond]
        tokens = "not measured (scripted)" if _scripted(rows) else _fmt_spread([r.total_tokens for r in rows], "{:.0f}")
        cells = [
            labels[cond],
            str(len({r.task_id for r in rows})),
            str(len(rows)),
            _quality(rows),
            f"{sum(r.success for r in rows) / len(rows):.3f}",
            f"{sum(r.subagents > 0 for r in rows) / len(rows):.2f}",
            _fmt_spread([r.critical_steps for r in rows], "{:.0f}"),
            _fmt_spread([r.total_steps for r in rows], "{:.0f}"),
            tokens,
            _fmt_spread([r.wall_time_s for r in rows], "{:.2f}"),
            str(sum(r.error is not None for r in rows)),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    note = (
        "Fan-out: share of episodes that created a sub-agent. "
        "Steps, tokens and wall time: median (min–max) over episodes."
    )
    return [*lines, "", note, ""]


def _compute_table(by_cond: dict[Condition, list[RawEpisode]], labels: dict[Condition, str]) -> list[str]:
    """Tokens by role, side by side (medians over episodes; total as a multiple of the first arm's)."""
    conds = [c for c in sorted(by_cond) if not _scripted(by_cond[c])]
    if not conds:
        return []
    lines = [
        "| arm | orchestrator prompt | orchestrator completion | sub-agent prompt | sub-agent completion "
        "| total (mean) | × first arm |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    first = None
    for cond in conds:
        rows = by_cond[cond]

        def med(role: str, part: str, rs: Sequence[RawEpisode] = rows) -> str:
            values = [float(getattr(r.tokens.get(role, RoleTokens()), part)) for r in rs]
            return f"{spread(values).median:.0f}"

        total = sum(r.total_tokens for r in rows) / len(rows)
        first = first if first is not None else total
        ratio = f"{total / first:.2f}×" if first else "—"
        cells = [med("orchestrator", "prompt"), med("orchestrator", "completion")]
        cells += [med("subagent", "prompt"), med("subagent", "completion"), f"{total:.0f}", ratio]
        lines.append(f"| {labels[cond]} | " + " | ".join(cells) + " |")
    return ["Tokens by role: medians over episodes; total: mean per episode.", "", *lines, ""]


def _per_task(rows: Sequence[RawEpisode]) -> dict[str, float]:
    """The metric per task, averaged over repeated runs."""
    acc: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        acc[r.task_id].append(r.metric)
    return {t: sum(v) / len(v) for t, v in acc.items()}


def _undersampled(rows: Sequence[RawEpisode]) -> bool:
    """Sampling was on (a model at temperature > 0) and some task has fewer than MIN_SAMPLES episodes."""
    sampled = any(
        float(r.config.get("orchestrator_sampling", {}).get("temperature", 0.0)) > 0 for r in rows
    ) and not _scripted(rows)
    per_task: dict[str, int] = defaultdict(int)
    for r in rows:
        per_task[r.task_id] += 1
    return sampled and min(per_task.values(), default=0) < MIN_SAMPLES


def _comparisons(by_cond: dict[Condition, list[RawEpisode]], labels: dict[Condition, str], seed: int) -> list[str]:
    conds = sorted(by_cond)
    if len(conds) < 2:
        return []
    lines = [
        "| comparison | n | mean A | mean B | A − B | 95 % CI | wins/losses/ties | sign p | Wilcoxon p | |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for i, a in enumerate(conds):
        for b in conds[i + 1 :]:
            ta, tb = _per_task(by_cond[a]), _per_task(by_cond[b])
            common = [t for t in ta if t in tb]
            if not common:
                lines.append(f"| {labels[a]} vs {labels[b]} | 0 | | | | | | | | no common tasks |")
                continue
            p = paired([tb[t] for t in common], [ta[t] for t in common], seed=seed)
            few = [labels[c] for c in (a, b) if _undersampled(by_cond[c])]
            notes = [f"n < {HEADLINE_MIN_N}"] * (not p.headline) + [
                f"sampled with < {MIN_SAMPLES} samples per task ({', '.join(few)})"
            ] * bool(few)
            note = f"{'; '.join(notes)}: not a headline" if notes else ""
            lines.append(
                f"| {labels[a]} vs {labels[b]} | {p.n} | {p.mean_b:.3f} | {p.mean_a:.3f} | {p.diff:+.3f} | "
                f"[{p.ci_low:+.3f}, {p.ci_high:+.3f}] | {p.wins}/{p.losses}/{p.ties} | {p.sign_p:.3g} | "
                f"{p.wilcoxon_p:.3g} ({p.wilcoxon_method}) | {note} |"
            )
    return [
        "Paired over the tasks both ran (per-task means over repeated runs); A − B of the quality metric, "
        "percentile bootstrap (10,000 resamples, seeded), two-sided tests.",
        "",
        *lines,
        "",
    ]


def _by_condition(rows: Sequence[RawEpisode]) -> dict[Condition, list[RawEpisode]]:
    by_cond: dict[Condition, list[RawEpisode]] = defaultdict(list)
    for r in rows:
        by_cond[_condition(r)].append(r)
    return by_cond


def comparisons(rows: Sequence[RawEpisode], *, seed: int = 0) -> str:
    """The paired-comparison table of one run's rows (markdown; empty with fewer than two conditions)."""
    by_cond = _by_condition(rows)
    return "\n".join(_comparisons(by_cond, _labels(list(by_cond)), seed))


def render_report(runs: Sequence[RunData], *, seed: int = 0) -> str:
    """The markdown report of ``runs`` (deterministic for the same raw files)."""
    if not runs:
        raise ConfigError("no runs to report")
    groups: dict[tuple[str, str, str], list[RunData]] = defaultdict(list)
    for run in runs:
        groups[_group_key(run)].append(run)
    out = ["# swarm eval report", ""]
    for key in sorted(groups):
        group = groups[key]
        rows = [r for run in group for r in run.rows]
        if not rows:
            out += [f"## {key[0]} · {key[1]} split", "", "No finished episodes.", ""]
            continue
        by_cond = _by_condition(rows)
        labels = _labels(list(by_cond))
        out += _header(group, rows)
        out += _summary_table(by_cond, labels)
        out += _compute_table(by_cond, labels)
        out += _comparisons(by_cond, labels, seed)
    return "\n".join(out).rstrip() + "\n"


def _short_knobs(knobs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v if not isinstance(v, list) else '+'.join(map(str, v))}" for k, v in sorted(knobs.items()))


def _versus(swarm: Sequence[RawEpisode], other: Sequence[RawEpisode], seed: int) -> str:
    """``swarm − other [CI], p`` over their common tasks (Wilcoxon), ``n = …`` below a headline."""
    ta, tb = _per_task(swarm), _per_task(other)
    common = [t for t in ta if t in tb]
    if not common:
        return "—"
    p = paired([tb[t] for t in common], [ta[t] for t in common], seed=seed)
    text = f"{p.diff:+.3f} [{p.ci_low:+.3f}, {p.ci_high:+.3f}], p = {p.wilcoxon_p:.2g}"
    return text if p.headline else f"{text} (n = {p.n}: not a headline)"


def render_summary(runs: Sequence[RunData], *, seed: int = 0) -> str:
    """One markdown row per run: its workload, split, seed, knobs, model and tasks; each arm's quality
    (the metric's mean) and median wall time; the swarm against single-parallel and against single, paired
    over the tasks both ran (mean difference, bootstrap 95 % interval, Wilcoxon p). A run with an arm on
    more than one model or adapter is a ConfigError: one column per arm cannot show it (the full report
    can)."""
    if not runs:
        raise ConfigError("no runs to report")
    arms = ARM_ORDER
    lines = [
        "# swarm eval summary",
        "",
        "| run | workload | split · seed | knobs | model | tasks | "
        + " | ".join(arms)
        + " | swarm − single-parallel | swarm − single | wall s, median (swarm / single-parallel / single) |",
        "|---|---|---|---|---|---:|" + "---:|" * len(arms) + "---|---|---|",
    ]
    for run in runs:
        by_arm: dict[str, list[RawEpisode]] = defaultdict(list)
        for r in run.rows:
            by_arm[r.arm].append(r)
        conds = {_condition(r) for r in run.rows}
        if len(conds) > len({c.arm for c in conds}):
            raise ConfigError(
                f"run {run.path} holds an arm on more than one model or adapter; --summary has one column "
                "per arm: use the full report (swarm eval --report without --summary)"
            )
        model = " / ".join(dict.fromkeys(c.model for c in sorted(conds))) or "—"
        quality = [f"{sum(r.metric for r in by_arm[a]) / len(by_arm[a]):.3f}" if by_arm[a] else "—" for a in arms]
        walls = [f"{spread([r.wall_time_s for r in by_arm[a]]).median:.1f}" if by_arm[a] else "—" for a in arms]
        versus = [_versus(by_arm["swarm"], by_arm[a], seed) if by_arm["swarm"] and by_arm[a] else "—" for a in arms[1:]]
        m = run.manifest
        lines.append(
            f"| {run.path.name} | {m.workload} | {m.split} · {m.seed} | "
            f"{_short_knobs(_knobs(run))} | {model} | {len({r.task_id for r in run.rows})} | "
            + " | ".join(quality)
            + f" | {' | '.join(versus)} | {' / '.join(walls)} |"
        )
    return "\n".join(
        [
            *lines,
            "",
            "Quality: the workload metric's mean over a run's episodes. A − B: paired over the tasks both arms "
            "ran, percentile bootstrap 95 % interval (10,000 resamples, seeded), two-sided exact or normal "
            "Wilcoxon p.",
            "",
        ]
    )


@dataclass(frozen=True, slots=True)
class CurvePoint:
    """One arm at one value of a knob: medians over its episodes (quality: the mean)."""

    value: Any
    arm: str
    n: int
    quality: float
    critical_steps: float
    total_steps: float
    tokens: float | None
    """None for a scripted policy (its counts come from a stand-in tokenizer)."""
    wall_time_s: float


def _scripted(rows: Sequence[RawEpisode]) -> bool:
    return all(r.provenance.backend in ("scripted", "gold") for r in rows)


def curve(runs: Sequence[RunData], knob: str) -> list[CurvePoint]:
    """Points of a curve over ``knob`` (the width curve: ``entities``), one per (knob value, arm), from
    each run's resolved knobs; runs without the knob are a ConfigError."""
    rows: dict[tuple[Any, str], list[RawEpisode]] = defaultdict(list)
    for run in runs:
        if knob not in run.manifest.knobs:
            raise ConfigError(f"run {run.path} has no knob {knob!r} (its knobs: {sorted(run.manifest.knobs)})")
        for r in run.rows:
            rows[(run.manifest.knobs[knob], r.arm)].append(r)
    points = []
    for (value, arm), rs in rows.items():
        points.append(
            CurvePoint(
                value=value,
                arm=arm,
                n=len({r.task_id for r in rs}),
                quality=sum(r.metric for r in rs) / len(rs),
                critical_steps=spread([r.critical_steps for r in rs]).median,
                total_steps=spread([r.total_steps for r in rs]).median,
                tokens=None if _scripted(rs) else spread([r.total_tokens for r in rs]).median,
                wall_time_s=spread([r.wall_time_s for r in rs]).median,
            )
        )
    rank = {a: i for i, a in enumerate(ARM_ORDER)}
    return sorted(points, key=lambda p: (p.value, rank.get(p.arm, len(rank)), p.arm))


def render_curve(runs: Sequence[RunData], knob: str) -> str:
    """The curve over ``knob`` as a markdown table: one row per knob value and arm."""
    points = curve(runs, knob)
    metric = runs[0].manifest.metric_name if runs else "quality"
    lines = [
        f"| {knob} | arm | tasks | {metric} (mean) | critical steps | total steps | tokens | wall s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {p.value} | {p.arm} | {p.n} | {p.quality:.3f} | {p.critical_steps:g} | {p.total_steps:g} | "
        f"{'not measured' if p.tokens is None else f'{p.tokens:.0f}'} | {p.wall_time_s:.2f} |"
        for p in points
    ]
    return "\n".join([*lines, "", "Steps, tokens and wall time: medians over episodes.", ""])


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agent_swarm.orchestrator.eval_report [--curve KNOB | --summary] DIR [DIR ...]``: print the
    report, the curve over a knob, or one row per run (exit 2 on bad input)."""
    args = list(sys.argv[1:] if argv is None else argv)
    knob, summary = None, False
    if args[:1] == ["--curve"] and len(args) >= 2:
        knob, args = args[1], args[2:]
    elif args[:1] == ["--summary"]:
        summary, args = True, args[1:]
    if not args or any(a.startswith("-") for a in args):
        sys.stderr.write(
            "usage: python -m agent_swarm.orchestrator.eval_report [--curve KNOB | --summary] RUN_DIR [RUN_DIR ...]\n"
        )
        return 2
    try:
        runs = load_runs([Path(a) for a in args])
        text = render_curve(runs, knob) if knob else render_summary(runs) if summary else render_report(runs)
        sys.stdout.write(text)
    except ConfigError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
