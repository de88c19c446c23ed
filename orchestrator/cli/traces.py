"""``swarm traces``: inspect recorded runs in the terminal.

``swarm traces list`` shows recent episodes (id, task, status, critical/total steps, wall time);
``swarm traces show ID`` draws a Gantt-style timeline per agent grouped by stage, with the steps of
the critical path drawn ``█`` (and highlighted) and the others ``░``, then the DAG summary and each
sub-agent's status. ``ID`` is an episode id, a unique prefix of one, a trace id (records store it),
or a path to an episode directory or ``episode.json``. ``--json`` gives the same data as JSON.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from agent_swarm.orchestrator.cli.live import stages_from_record
from agent_swarm.orchestrator.cli.telemetry_setup import TRACE_FILE
from agent_swarm.orchestrator.environment import environment
from agent_swarm.orchestrator.store import EPISODE_FILE, iter_episodes, read_episode, records_dir
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.monitors import episode_monitors
from agent_swarm.swarm.records import EpisodeRecord, StepRecord
from agent_swarm.swarm.timings import episode_timings

__all__ = ["episode_timeline", "find_episode", "traces_app"]

traces_app = typer.Typer(
    name="traces",
    help="Inspect recorded runs: list them, show one as a timeline with its critical path (or an HTML "
    "page), push its spans to Jaeger."
    "\n\nExamples:\n\n\b\n  swarm traces list\n  swarm traces show 3f2a\n  swarm traces show 3f2a --html\n"
    "  swarm traces push 3f2a",
    no_args_is_help=True,
)
_err = Console(stderr=True)

CRITICAL, OTHER = "█", "░"
_STATUS_STYLE = {
    "completed": "green",
    "failed": "red",
    "timeout": "yellow",
    "budget_exhausted": "magenta",
    "context_exhausted": "magenta",
    "cancelled": "dim",
}

RootOption = Annotated[
    Path | None,
    typer.Option(
        "--out",
        "-o",
        help="where runs were written (swarm run/eval --out, or a rollout's directory); searched recursively "
        "[default: $SWARM_RECORDS_DIR, else ~/.local/share/swarm/records, where swarm run writes]",
    ),
]


def _exit(message: str, code: int = 2) -> typer.Exit:
    _err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


ROLLOUT_EPISODES = "episodes.jsonl"
"""What ``swarm rollout`` writes: one line per episode, its record under ``record``."""


def _reason(exc: Exception) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{type(exc).__name__}: {first}"


def _sources(root: Path) -> list[Path]:
    """Episode files (``swarm run``/``swarm eval``) and rollout files (``swarm rollout``) under
    ``root``, newest first; ``root`` may itself be a rollout's output directory."""
    if not root.is_dir():
        return []
    files = list(iter_episodes(root)) + [p for p in root.rglob(ROLLOUT_EPISODES) if p.is_file()]
    return sorted(files, key=lambda p: p.stat().st_mtime, reverse=True)


def _rollout_records(path: Path) -> Iterator[tuple[Path, EpisodeRecord | None, str | None]]:
    """The episodes of a rollout file, a line at a time (a large file is never held whole)."""
    try:
        with path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = Path(f"{path}:{lineno}")
                try:
                    yield where, EpisodeRecord.model_validate(json.loads(line)["record"]), None
                except (ValueError, KeyError, TypeError, ValidationError) as exc:
                    yield where, None, _reason(exc)
    except OSError as exc:
        yield path, None, _reason(exc)


def _records(root: Path) -> Iterator[tuple[Path, EpisodeRecord | None, str | None]]:
    """Every episode under ``root`` (newest file first) with its record, or the reason it is unreadable."""
    for path in _sources(root):
        if path.name == ROLLOUT_EPISODES:
            yield from _rollout_records(path)
            continue
        try:
            yield path, read_episode(path), None
        except (OSError, ValueError, ValidationError) as exc:
            yield path, None, _reason(exc)


def source_of(path: Path) -> str:
    """Which command wrote an episode: ``run``, ``eval`` (``<run>/episodes/<mode>/<id>/``) or ``rollout``."""
    if ROLLOUT_EPISODES in path.name:
        return "rollout"
    parents = path.parents
    return "eval" if len(parents) > 2 and parents[2].name == "episodes" else "run"


def find_episode(root: Path, ident: str) -> tuple[Path, EpisodeRecord]:
    """Resolve an episode id, unique id prefix, trace id, or path. Raises ``LookupError`` with the reason."""
    as_path = Path(ident)
    if as_path.exists():
        file = as_path / EPISODE_FILE if as_path.is_dir() else as_path
        try:
            return file, read_episode(file)
        except (OSError, ValueError, ValidationError) as exc:
            raise LookupError(f"{file} is not a readable episode record: {exc}") from None
    exact: list[tuple[Path, EpisodeRecord]] = []
    prefix: list[tuple[Path, EpisodeRecord]] = []
    key = ident.strip().lower()
    for path, record, _ in _records(root):
        if record is None:
            continue
        if record.episode_id == ident or (record.trace_id is not None and record.trace_id == key):
            exact.append((path, record))
        elif record.episode_id.startswith(ident) or (record.trace_id or "").startswith(key):
            prefix.append((path, record))
    if exact:
        return exact[0]
    if len(prefix) == 1:
        return prefix[0]
    if prefix:
        ids = ", ".join(r.episode_id for _, r in prefix[:8])
        raise LookupError(f"{ident!r} matches {len(prefix)} episodes ({ids}); give more of the id")
    raise LookupError(f"no episode matches {ident!r} under {root}/; `swarm traces list` shows recent runs")


def _summary(path: Path, record: EpisodeRecord) -> dict[str, Any]:
    return {
        "episode_id": record.episode_id,
        "task_id": record.task.id,
        "task": record.task.prompt,
        "status": record.status.value,
        "critical_steps": record.dag.critical_steps,
        "total_steps": record.dag.total_steps,
        "wall_time_s": record.wall_time_s,
        "started_at": record.started_at,
        "trace_id": record.trace_id,
        "source": source_of(path),
        "exported_to": record.metadata.get("otlp_endpoint"),
        "path": str(path),
    }


@traces_app.command("list")
def list_runs(
    out: RootOption = None,
    limit: Annotated[int, typer.Option("--limit", min=1, metavar="N", help="how many recent runs")] = 20,
    json_out: Annotated[bool, typer.Option("--json", help="one JSON object per run on stdout")] = False,
) -> None:
    """Recent episodes, newest first: id, source (run, eval or rollout), task, status,
    critical/total steps, wall time.

    OUT is searched recursively: `swarm run` records, `swarm eval` runs (OUT/eval/...) and
    `swarm rollout` output directories (their episodes.jsonl, in the order written) found under it.

    Examples:

    \b
      swarm traces list
      swarm traces list -o runs/r1 --limit 50 --json
    """
    out = out if out is not None else records_dir()
    rows: list[dict[str, Any]] = []
    bad: list[str] = []
    for path, record, error in _records(out):
        if record is None:
            bad.append(f"{path}: {error}")
            continue
        rows.append(_summary(path, record))
        if len(rows) >= limit:
            break
    for b in bad:
        _err.print(f"[yellow]skipped unreadable record[/yellow] {escape(b)}", soft_wrap=True)
    if json_out:
        for row in rows:
            typer.echo(json.dumps(row, ensure_ascii=False))
        return
    if not rows:
        _err.print(f"no runs under {escape(str(out))}/ (run one with: swarm run --demo capitals)")
        return
    console = Console()
    header = f"{'episode':<18} {'source':<7} {'started (UTC)':<19} {'status':<17} {'crit/total':>10} {'wall':>8}  task"
    console.print(Text(header, style="bold"), soft_wrap=True)
    for row in rows:
        started = datetime.fromtimestamp(row["started_at"], UTC).strftime("%Y-%m-%d %H:%M:%S")
        line = Text(f"{row['episode_id']:<18} {row['source']:<7} {started:<19} ")
        line.append(f"{row['status']:<17}", style=_STATUS_STYLE.get(row["status"], ""))
        steps = f"{row['critical_steps']}/{row['total_steps']}"
        line.append(f" {steps:>10} {row['wall_time_s']:>7.2f}s  ")
        line.append(_task_text_from(row["task"]))
        console.print(line, soft_wrap=True)


def _task_text_from(text: str, width: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


# -- the timeline -----------------------------------------------------------------------------------


def _step_json(step: StepRecord, critical: set[str]) -> dict[str, Any]:
    return {
        "index": step.index,
        "started": step.started,
        "ended": step.ended,
        "critical": f"{step.agent_id}#{step.index}" in critical,
        "tokens": step.prompt_tokens + step.completion_tokens,
        "tool_calls": [r.call.name for r in step.tool_results],
        "tool_errors": sum(r.is_error for r in step.tool_results),
        "error": step.error,
        "timings": asdict(step.timings) if step.timings is not None else None,
    }


def episode_timeline(record: EpisodeRecord, trace_file: Path | None = None) -> dict[str, Any]:
    """The timeline of one episode as plain data: rows per agent grouped by stage, steps flagged
    ``critical`` when they lie on the DAG's critical path, the DAG summary and sub-agent statuses."""
    critical = set(record.dag.critical_path)
    views = {v.index: v for v in stages_from_record(record)}
    stages = []
    for stage in record.stages:
        rows = [
            {
                "agent_id": s.agent_id,
                "name": "orchestrator",
                "status": None,
                "started": s.started,
                "ended": s.ended,
                "steps": [_step_json(s, critical)],
            }
            for s in stage.orchestrator_steps
        ]
        for r in stage.subagents:
            rows.append(
                {
                    "agent_id": r.agent_id,
                    "name": r.name,
                    "status": r.status.value,
                    "error": r.error,
                    "error_type": r.error_type,
                    "started": r.started,
                    "ended": r.ended,
                    "step_cap": r.step_cap,
                    "steps": [_step_json(s, critical) for s in r.step_records],
                }
            )
        stages.append(
            {
                "index": stage.index,
                "kind": stage.kind,
                "actions": [asdict(a) for a in views[stage.index].actions] if stage.index in views else [],
                "started": stage.started,
                "ended": stage.ended,
                "width": len(stage.subagents),
                "critical_steps": stage.critical_steps,
                "rows": rows,
            }
        )
    statuses = Counter(r.status.value for r in record.subagent_results)
    return {
        **_summary(Path(""), record),
        "answer": record.answer,
        "error": record.error,
        "model": record.model,
        "trace_file": str(trace_file) if trace_file is not None else None,
        "dag": record.dag.model_dump(mode="json"),
        "subagent_statuses": dict(sorted(statuses.items())),
        "monitors": (record.monitors or episode_monitors(record)).model_dump(mode="json"),
        "stages": stages,
        "timings": asdict(episode_timings(record)),
    }


def _bar(steps: list[dict[str, Any]], t_end: float, width: int) -> Text:
    """One Gantt row: each step's span of time; a cell shows the critical glyph if any critical step
    touches it. Every step gets at least one cell, so instant scripted steps stay visible."""
    cells: list[str | None] = [None] * width
    scale = width / t_end if t_end > 0 else 0.0
    for step in steps:
        a = min(width - 1, max(0, math.floor(step["started"] * scale)))
        b = min(width, max(a + 1, math.ceil(step["ended"] * scale)))
        for i in range(a, b):
            if step["critical"]:
                cells[i] = CRITICAL
            elif cells[i] is None:
                cells[i] = OTHER
    text = Text()
    for c in cells:
        if c is None:
            text.append(" ")
        elif c == CRITICAL:
            text.append(c, style="bold red")
        else:
            text.append(c, style="cyan")
    return text


def _render(data: dict[str, Any], console: Console) -> None:
    _render_header(data, console)
    _render_gantt(data, console)
    _render_dag(data["dag"], console)
    _render_timings(data, console)
    statuses = data["subagent_statuses"]
    if statuses:
        console.print(
            Text("sub-agents  ")
            + Text(", ").join(Text(f"{n} {s}", style=_STATUS_STYLE.get(s, "")) for s, n in statuses.items())
        )
    _render_monitors(data["monitors"], console)
    if data["error"]:
        console.print(Text(f"error  {data['error']}", style="red"), soft_wrap=True)


def _render_header(data: dict[str, Any], console: Console) -> None:
    """The episode line (id, status, wall time, model), its task, and where its trace went."""
    status = data["status"]
    console.print(
        Text.assemble(
            ("episode ", "bold"),
            (data["episode_id"], "bold"),
            "  ",
            (status, _STATUS_STYLE.get(status, "")),
            f"  {data['wall_time_s']:.2f}s  model {data['model'] or '?'}",
        )
    )
    console.print(Text(f"task    {_task_text_from(data['task'], 100)}"), soft_wrap=True)
    if data["trace_id"] and data.get("exported_to"):
        console.print(Text(f"trace   {data['trace_id']}  (Jaeger: {jaeger_url(data)})"), soft_wrap=True)
    elif data["trace_id"]:
        console.print(Text(f"trace   {data['trace_id']}  (not exported over OTLP)"), soft_wrap=True)
    if data["trace_file"]:
        console.print(Text(f"file    {data['trace_file']}  (Jaeger UI: Search → Upload JSON)"), soft_wrap=True)


def _render_gantt(data: dict[str, Any], console: Console) -> None:
    """Per stage, its actions and one row per agent: status, steps, and a time bar on a shared axis."""
    t_end = max([data["wall_time_s"], *(r["ended"] for s in data["stages"] for r in s["rows"])], default=0.0)
    label_w = min(28, max([12, *(len(r["agent_id"]) for s in data["stages"] for r in s["rows"])]))
    width = max(20, min(72, console.width - label_w - 44))
    console.print()
    console.print(
        Text(f"{'':<{label_w}} {'status':<17}{'steps':>5}  0s{'':<{width - 2 - len(f'{t_end:.2f}s')}}{t_end:.2f}s"),
        style="dim",
    )
    for stage in data["stages"]:
        console.print(
            Text(
                f"stage {stage['index']} · {stage['kind']} · width {stage['width']} · "
                f"critical steps {stage['critical_steps']}",
                style="bold",
            )
        )
        _render_actions(stage["actions"], console)
        for row in stage["rows"]:
            on_path = any(s["critical"] for s in row["steps"])
            label = row["agent_id"] if len(row["agent_id"]) <= label_w else row["agent_id"][: label_w - 1] + "…"
            line = Text(f"{label:<{label_w}} ", style="bold" if on_path else "")
            st = row["status"] or ""
            line.append(f"{st:<17}", style=_STATUS_STYLE.get(st, ""))
            line.append(f"{len(row['steps']):>5} │")
            line.append_text(_bar(row["steps"], t_end, width))
            line.append("│")
            if row.get("error"):
                line.append(f" {row['error_type'] or 'error'}", style="red")
            console.print(line, no_wrap=True, overflow="ellipsis")


def _render_dag(dag: dict[str, Any], console: Console) -> None:
    """The DAG's step counts, speed-up and stage widths, and its critical path (shortened past 12)."""
    console.print()
    console.print(Text("DAG", style="bold"))
    console.print(
        Text(
            f"critical steps {dag['critical_steps']} · total steps {dag['total_steps']} "
            f"(main {dag['main_steps']}, sub-agents {dag['subagent_steps']}) · speed-up ×{dag['speedup']:.2f} · "
            f"stage widths {list(dag['stage_widths'])} · wall critical path {dag['wall_critical_path_s']:.2f}s"
        ),
        soft_wrap=True,
    )
    path = list(dag["critical_path"])
    if path:
        shown = " → ".join(path if len(path) <= 12 else [*path[:5], "…", *path[-5:]])
        console.print(Text(f"critical path ({CRITICAL}): {shown}"), soft_wrap=True)


def _render_monitors(m: dict[str, Any], console: Console) -> None:
    """The collapse monitors (agent_swarm.swarm.monitors): the ones that fired in yellow, with their numbers."""
    ratio, finish = m["straggler_ratio"], m["finish_rate"]
    numbers = (
        f"finish rate {'-' if finish is None else f'{finish:.2f}'} · straggler ratio "
        f"{'-' if ratio is None else f'{ratio:.1f}'} · duplicate sub-tasks {m['duplicate_tasks']} · "
        f"unused reports {m['unused_reports']} · parts {m['parts'] or '-'}"
    )
    flags = Text(" ".join(f"⚑ {f.replace('_', ' ')}" for f in m["flags"]) or "none fired", style="yellow")
    console.print(Text("monitors  ") + flags + Text(f"  ({numbers})", style="dim"), soft_wrap=True)


def _render_timings(data: dict[str, Any], console: Console) -> None:
    """Where the time went (agent_swarm.swarm.timings): engine start, prefill, decode, queueing, the runtime."""
    t = data["timings"]
    if not t["measured_calls"]:
        return
    console.print(Text("time", style="bold"))
    start = (
        f"engine start {t['startup_s']:.2f}s (model check {t['hash_check_s']:.2f}s, load {t['model_load_s']:.2f}s) · "
    )
    console.print(
        Text(
            f"wall {t['wall_s']:.2f}s · {start if t['startup_s'] else ''}runtime's own {t['runtime_s']:.2f}s · "
            f"model calls {t['measured_calls']} ({t['model_s']:.2f}s, queued {t['queue_s']:.2f}s)"
        ),
        soft_wrap=True,
    )
    console.print(
        Text(
            f"prefill {t['prefill_tokens']} tok in {t['prefill_s']:.2f}s · cached {t['cached_tokens']} tok "
            f"({t['restored_tokens']} restored from disk) · decode {t['decode_tokens']} tok in {t['decode_s']:.2f}s"
        ),
        soft_wrap=True,
    )
    for stage in data["stages"]:
        for row in stage["rows"]:
            for step in row["steps"] if row["name"] == "orchestrator" else ():
                if step["timings"]:
                    s = step["timings"]
                    console.print(
                        Text(
                            f"  turn {step['index']}: prefill {s['prefill_tokens']} tok {s['prefill_s']:.2f}s, "
                            f"cached {s['cached_tokens']}, decode {s['decode_tokens']} tok {s['decode_s']:.2f}s, "
                            f"call {s['call_s']:.2f}s"
                        ),
                        style="dim",
                    )


_SHOWN_ACTIONS = 8


def _render_actions(actions: list[dict[str, Any]], console: Console) -> None:
    """The stage's actions other than sub-agent runs (those are the rows below): types created,
    rejected assignments and direct tool calls, each with its outcome and why it failed."""
    own = [a for a in actions if a["kind"] != "assign" or a["outcome"] == "rejected"]
    for a in own[:_SHOWN_ACTIONS]:
        verb = {"create": "create ", "assign": "assign_task → ", "tool": ""}[a["kind"]]
        line = Text(f"  {verb}{a['label']} ")
        line.append(a["outcome"], style=_STATUS_STYLE.get(a["outcome"], "red" if a["outcome"] == "rejected" else ""))
        if a["outcome"] in ("rejected", "failed"):
            kind = f" ({a['error_type']})" if a["error_type"] else ""
            line.append(f"{kind}: {_task_text_from(a['reason'] or '', 100)}", style="red")
        elif a["detail"]:
            line.append(f"  {_task_text_from(a['detail'], 60)}", style="dim")
        console.print(line, no_wrap=True, overflow="ellipsis")
    if len(own) > _SHOWN_ACTIONS:
        counts = Counter(a["outcome"] for a in own)
        more = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        console.print(Text(f"  … {len(own) - _SHOWN_ACTIONS} more actions ({more})", style="dim"))


def jaeger_url(data: dict[str, Any]) -> str:
    """The Jaeger UI page of an exported trace: ``SWARM_JAEGER_UI`` if set, else the UI port (16686)
    on the host the spans were exported to."""
    base = environment().jaeger_ui
    if not base:
        host = urlsplit(str(data["exported_to"]) if "//" in str(data["exported_to"]) else f"//{data['exported_to']}")
        base = f"http://{host.hostname or 'localhost'}:16686"
    return f"{base.rstrip('/')}/trace/{data['trace_id']}"


@traces_app.command("push")
def push_trace(
    ident: Annotated[str, typer.Argument(metavar="ID", help="episode id (or unique prefix), trace id, or path")],
    out: RootOption = None,
    otlp_endpoint: Annotated[
        str | None,
        typer.Option(
            "--otlp-endpoint",
            metavar="URL",
            help="OTLP receiver [default: OTEL_EXPORTER_OTLP_* or a local Jaeger on :4318]",
        ),
    ] = None,
    otlp_protocol: Annotated[
        str | None, typer.Option("--otlp-protocol", metavar="PROTOCOL", help="http/protobuf or grpc")
    ] = None,
) -> None:
    """Send a recorded episode's spans (its trace.jsonl) to an OTLP receiver, e.g. a Jaeger started
    after the run. Exit codes: 0 sent, 1 the receiver could not be reached or refused, 2 bad input.

    Examples:

    \b
      swarm traces push 3f2a
      swarm traces push 3f2a --otlp-endpoint http://jaeger.internal:4318
    """
    from agent_swarm.orchestrator.cli.telemetry_setup import resolve_otlp
    from agent_swarm.orchestrator.cli.trace_push import PushError, push

    try:
        path, record = find_episode(out if out is not None else records_dir(), ident)
        target = resolve_otlp(otlp_endpoint, otlp_protocol)
    except (LookupError, ConfigError) as exc:
        raise _exit(str(exc)) from None
    trace_file = path.parent / TRACE_FILE
    if path.name != EPISODE_FILE or not trace_file.is_file():
        raise _exit(f"episode {record.episode_id} has no {TRACE_FILE} beside its record (--no-trace-file?)")
    if target is None:
        raise _exit("OTEL_TRACES_EXPORTER=none turns export off; give --otlp-endpoint URL to push anyway")
    try:
        n = push(trace_file, target)
    except PushError as exc:
        raise _exit(f"{exc}; start Jaeger (README, Traces) or give --otlp-endpoint URL", 1) from None
    except ConfigError as exc:
        raise _exit(str(exc)) from None
    link = jaeger_url({"exported_to": target.endpoint, "trace_id": record.trace_id}) if record.trace_id else ""
    typer.echo(f"pushed {n} spans of episode {record.episode_id} to {target.endpoint}" + (f"; {link}" if link else ""))


def _write_page(path: Path, record: EpisodeRecord) -> Path:
    """The episode's HTML page beside its record (``episode.html``), or ``./<id>.html`` for a record
    read from a rollout's ``episodes.jsonl``; private to the user, like the record."""
    from agent_swarm.orchestrator.cli.trace_html import episode_page

    target = path.parent / "episode.html" if path.name == EPISODE_FILE else Path(f"{record.episode_id}.html")
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(episode_page(record))
    return target.resolve()


@traces_app.command("show")
def show(
    ident: Annotated[str, typer.Argument(metavar="ID", help="episode id (or unique prefix), trace id, or path")],
    out: RootOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="the timeline as JSON on stdout")] = False,
    html: Annotated[
        bool,
        typer.Option(
            "--html",
            help="write one self-contained HTML page (stage DAG, critical path, Gantt, transcripts on click; "
            "no network) next to the record, and print its path",
        ),
    ] = False,
) -> None:
    """One run as a timeline per agent, grouped by stage, with the critical path highlighted.

    Each stage names its actions: sub-agent types created, assignments rejected (and why) and
    direct tool calls with their outcomes; then a row per agent. The Jaeger link appears when the
    run was exported over OTLP.

    Examples:

    \b
      swarm traces show 3f2a
      swarm traces show traces/3f2a9c/episode.json --json
      swarm traces show 3f2a --html
    """
    try:
        path, record = find_episode(out if out is not None else records_dir(), ident)
    except LookupError as exc:
        raise _exit(str(exc)) from None
    if html:
        typer.echo(str(_write_page(path, record)))
        return
    trace_file = path.parent / TRACE_FILE
    data = episode_timeline(record, trace_file if trace_file.is_file() else None)
    data["path"] = str(path)
    if json_out:
        typer.echo(json.dumps(data, ensure_ascii=False))
        return
    _render(data, Console())
