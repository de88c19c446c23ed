"""``swarm traces show ID --html``: one episode as a single self-contained HTML page.

The page holds its data (a JSON island), its style and its script inline and loads nothing from the
network, so it opens from disk, from an e-mail attachment or a CI artefact. It draws:

- the **stage DAG**: per stage the orchestrator's turn, then its sub-agents side by side, each joined
  to the next stage's turn; nodes and edges on the critical path are drawn in red;
- the **critical path** as a list (agent, stage, steps) with the critical steps used of the budget;
- a **Gantt** of every agent's steps on the episode's clock, grouped by stage, critical steps in red;
- each agent's **transcript** (messages, tool calls, tool results) in a panel, on a click on its node
  or its Gantt row.

Everything a model or a user wrote is inserted as text (``textContent``), never as markup.
"""

from __future__ import annotations

import json
from typing import Any

from agent_swarm.orchestrator.cli.live import given_answer
from agent_swarm.swarm.messages import Message, ToolCall
from agent_swarm.swarm.records import EpisodeRecord, StepRecord, SubagentResult

__all__ = ["episode_page", "page_data"]

ORCHESTRATOR = "orchestrator"
_TEXT_CAP = 20_000
"""Characters kept of one message in the page (a transcript can hold whole documents)."""


def _cap(text: str) -> str:
    return text if len(text) <= _TEXT_CAP else text[:_TEXT_CAP] + f" … [{len(text) - _TEXT_CAP} more characters]"


def _call(c: ToolCall) -> str:
    return f"{c.name}({json.dumps(c.arguments, ensure_ascii=False)})"


def _message(m: Message) -> dict[str, Any]:
    calls = [_call(c) for c in getattr(m, "tool_calls", ())]
    name = getattr(m, "name", None)
    return {"role": m.role + (f" · {name}" if name else ""), "text": _cap(m.content), "calls": calls}


def _steps(steps: tuple[StepRecord, ...], critical: set[str]) -> list[dict[str, Any]]:
    return [
        {
            "index": s.index,
            "started": s.started,
            "ended": s.ended,
            "critical": f"{s.agent_id}#{s.index}" in critical,
            "tools": [r.call.name for r in s.tool_results],
            "error": s.error,
        }
        for s in steps
    ]


def _subagent(r: SubagentResult, stage: int, critical: set[str]) -> dict[str, Any]:
    steps = _steps(r.step_records, critical)
    return {
        "id": r.agent_id,
        "name": r.name,
        "role": "subagent",
        "stage": stage,
        "status": r.status.value,
        "error": r.error,
        "started": r.started,
        "ended": r.ended,
        "steps": steps,
        "critical": any(s["critical"] for s in steps),
        "transcript": [_message(m) for m in r.transcript],
    }


def _orchestrator(record: EpisodeRecord, stage_index: int, critical: set[str]) -> dict[str, Any]:
    stage = record.stages[stage_index]
    steps = _steps(stage.orchestrator_steps, critical)
    turns = [t for t in record.turns if t.stage == stage.index]
    transcript = [
        {"role": "assistant (orchestrator)", "text": _cap(t.text), "calls": [_call(c) for c in t.tool_calls]}
        for t in turns
    ]
    transcript += [{"role": f"tool · {r.call.name}", "text": _cap(r.content), "calls": []} for r in stage.tool_results]
    return {
        "id": f"{ORCHESTRATOR}@{stage.index}",
        "name": ORCHESTRATOR,
        "role": ORCHESTRATOR,
        "stage": stage.index,
        "status": stage.kind,
        "error": None,
        "started": min((s.started for s in stage.orchestrator_steps), default=stage.started),
        "ended": max((s.ended for s in stage.orchestrator_steps), default=stage.started),
        "steps": steps,
        "critical": any(s["critical"] for s in steps),
        "transcript": transcript,
    }


def page_data(record: EpisodeRecord) -> dict[str, Any]:
    """What the page draws, as plain data (also useful on its own)."""
    critical = set(record.dag.critical_path)
    budget = record.config.get("max_critical_steps")
    stages: list[dict[str, Any]] = []
    for i, stage in enumerate(record.stages):
        agents = [_orchestrator(record, i, critical), *(_subagent(r, stage.index, critical) for r in stage.subagents)]
        stages.append(
            {
                "index": stage.index,
                "kind": stage.kind,
                "width": len(stage.subagents),
                "critical_steps": stage.critical_steps,
                "started": stage.started,
                "ended": stage.ended,
                "agents": agents,
            }
        )
    path = [
        {"id": a["id"], "name": a["name"], "stage": s["index"], "steps": sum(x["critical"] for x in a["steps"])}
        for s in stages
        for a in s["agents"]
        if a["critical"]
    ]
    return {
        "episode_id": record.episode_id,
        "task": _cap(record.task.prompt),
        "status": record.status.value,
        "answer": given_answer(record),
        "error": record.error,
        "model": record.model,
        "budget": budget if isinstance(budget, int) else None,
        "critical_steps": record.dag.critical_steps,
        "total_steps": record.dag.total_steps,
        "wall_time_s": record.wall_time_s,
        "scripted": bool(record.metadata.get("scripted") or record.task.metadata.get("scripted")),
        "stages": stages,
        "critical_path": path,
    }


def episode_page(record: EpisodeRecord) -> str:
    """The self-contained HTML page of one episode."""
    data = json.dumps(page_data(record), ensure_ascii=False).replace("</", "<\\/")
    title = f"swarm · episode {record.episode_id}"
    return _PAGE.replace("__TITLE__", _escape(title)).replace("__DATA__", data)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy"
  content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>__TITLE__</title>
<style>
:root { --crit: #d62728; --node: #4c78a8; --orch: #2f2f2f; --muted: #777; --bg: #fafafa; }
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; background: var(--bg); color: #222; }
header { padding: 12px 20px; background: #fff; border-bottom: 1px solid #ddd; }
h1 { font-size: 18px; margin: 0 0 4px; } h2 { font-size: 15px; margin: 18px 0 6px; }
main { display: flex; gap: 16px; padding: 0 20px 20px; }
#left { flex: 3; min-width: 0; } #panel { flex: 2; min-width: 280px; max-height: 92vh; overflow: auto;
  position: sticky; top: 8px; background: #fff; border: 1px solid #ddd; padding: 8px 12px; margin-top: 18px; }
.facts span { margin-right: 14px; } .muted { color: var(--muted); } .scripted { color: #b8860b; font-weight: bold; }
svg { background: #fff; border: 1px solid #ddd; display: block; } .scroll { overflow-x: auto; }
.node { cursor: pointer; } .node text { font-size: 11px; pointer-events: none; }
.row { cursor: pointer; } .row:hover rect.bg { fill: #eef3fb; }
#path li.crit { color: var(--crit); }
.msg { border-top: 1px solid #eee; padding: 6px 0; } .role { font-weight: bold; color: #555; }
.msg pre { white-space: pre-wrap; word-break: break-word; margin: 4px 0; font: 12px/1.35 ui-monospace, monospace; }
.call { color: #1f5f99; }
.legend span { margin-right: 12px; } .sw { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
</style>
</head>
<body>
<header>
  <h1 id="title"></h1>
  <div class="facts" id="facts"></div>
  <div id="task" class="muted"></div>
</header>
<main>
<div id="left">
  <h2>Stages and the critical path</h2>
  <div class="legend"><span><i class="sw" style="background:var(--crit)"></i>on the critical path</span>
    <span><i class="sw" style="background:var(--orch)"></i>orchestrator</span>
    <span><i class="sw" style="background:var(--node)"></i>sub-agent</span></div>
  <div class="scroll"><svg id="dag"></svg></div>
  <h2>Critical path</h2>
  <ol id="path"></ol>
  <h2>Gantt of agents (seconds on the episode's clock)</h2>
  <div class="scroll"><svg id="gantt"></svg></div>
</div>
<aside id="panel"><h2 id="ptitle">Transcript</h2><div class="muted" id="phint">Click a node or a row.</div>
  <div id="transcript"></div></aside>
</main>
<script type="application/json" id="data">__DATA__</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const NS = "http://www.w3.org/2000/svg";
const MAX_SHOWN = 24;
function el(tag, attrs, text) {
  const e = tag.startsWith("svg:") ? document.createElementNS(NS, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
const agents = {};
for (const s of D.stages) for (const a of s.agents) agents[a.id] = a;

function header() {
  document.getElementById("title").textContent = "episode " + D.episode_id + " · " + D.status;
  const f = document.getElementById("facts");
  const facts = [
    "critical steps " + D.critical_steps + (D.budget !== null ? "/" + D.budget : ""),
    "total steps " + D.total_steps, "stages " + D.stages.length, "wall " + D.wall_time_s.toFixed(2) + " s",
    "model " + (D.model || "?"),
  ];
  for (const t of facts) f.appendChild(el("span", {}, t));
  if (D.scripted) f.appendChild(el("span", {class: "scripted"}, "SCRIPTED policy (no model)"));
  const answer = D.answer === null ? "(no answer: the episode " + D.status + ")" : D.answer;
  f.appendChild(el("div", {}, "answer: " + answer.slice(0, 400)));
  if (D.error) f.appendChild(el("div", {style: "color:var(--crit)"}, "error: " + D.error));
  document.getElementById("task").textContent = "task: " + D.task.slice(0, 600);
}

function dag() {
  const svg = document.getElementById("dag");
  const colW = 250, rowH = 30, top = 40, nodeW = 210, nodeH = 22;
  const pos = {};
  let maxRows = 1;
  D.stages.forEach((s, i) => {
    const x = 20 + i * colW;
    svg.appendChild(el("svg:text", {x: x, y: 18, "font-size": 12, "font-weight": "bold"},
      "stage " + s.index + " · " + s.kind + " · +" + s.critical_steps));
    const shown = s.agents.slice(0, MAX_SHOWN + 1);
    shown.forEach((a, j) => { pos[a.id] = {x: x, y: top + j * rowH}; });
    maxRows = Math.max(maxRows, shown.length + (s.agents.length > shown.length ? 1 : 0));
    if (s.agents.length > shown.length)
      svg.appendChild(el("svg:text", {x: x, y: top + shown.length * rowH + 14, "font-size": 11, fill: "#777"},
        "… " + (s.agents.length - shown.length) + " more sub-agents"));
  });
  // Edges: a turn starts its sub-agents; the next turn waits for all of them.
  D.stages.forEach((s, i) => {
    const orch = s.agents[0], next = D.stages[i + 1] ? D.stages[i + 1].agents[0] : null;
    const subs = s.agents.slice(1).filter(a => pos[a.id]);
    const link = (a, b) => {
      if (!pos[a.id] || !pos[b.id]) return;
      const crit = a.critical && b.critical;
      svg.appendChild(el("svg:line", {x1: pos[a.id].x + nodeW, y1: pos[a.id].y + nodeH / 2, x2: pos[b.id].x,
        y2: pos[b.id].y + nodeH / 2, stroke: crit ? "var(--crit)" : "#bbb", "stroke-width": crit ? 2.5 : 1,
        class: crit ? "edge crit" : "edge"}));
    };
    for (const sub of subs) { link(orch, sub); if (next) link(sub, next); }
    if (next && subs.length === 0) link(orch, next);
  });
  for (const s of D.stages) for (const a of s.agents) {
    if (!pos[a.id]) continue;
    const g = el("svg:g", {class: "node" + (a.critical ? " crit" : ""), "data-agent": a.id});
    const fill = a.role === "orchestrator" ? "var(--orch)" : "var(--node)";
    g.appendChild(el("svg:rect", {x: pos[a.id].x, y: pos[a.id].y, width: nodeW, height: nodeH, rx: 4, fill: fill,
      stroke: a.critical ? "var(--crit)" : "none", "stroke-width": a.critical ? 4 : 0}));
    const label = (a.role === "orchestrator" ? "orchestrator" : a.id) + " · " + a.steps.length +
      (a.steps.length === 1 ? " step · " : " steps · ") + a.status;
    g.appendChild(el("svg:text", {x: pos[a.id].x + 6, y: pos[a.id].y + 15, fill: "#fff"}, label.slice(0, 34)));
    g.appendChild(el("svg:title", {}, label));
    g.addEventListener("click", () => show(a.id));
    svg.appendChild(g);
  }
  svg.setAttribute("width", 40 + D.stages.length * colW);
  svg.setAttribute("height", top + maxRows * rowH + 10);
}

function criticalPath() {
  const ol = document.getElementById("path");
  for (const p of D.critical_path) {
    const li = el("li", {class: "crit"}, (p.name === "orchestrator" ? "orchestrator" : p.id) + " · stage " + p.stage +
      " · " + p.steps + " critical step" + (p.steps === 1 ? "" : "s"));
    li.style.cursor = "pointer";
    li.addEventListener("click", () => show(p.id));
    ol.appendChild(li);
  }
  const used = "= critical steps " + D.critical_steps + (D.budget !== null ? "/" + D.budget : "");
  const total = el("li", {class: "muted"}, used);
  total.style.listStyle = "none";
  ol.appendChild(total);
}

function gantt() {
  const svg = document.getElementById("gantt");
  const rows = [];
  for (const s of D.stages) s.agents.forEach((a, j) => { if (j <= MAX_SHOWN) rows.push(a); });
  const end = Math.max(D.wall_time_s, ...rows.map(a => a.ended), 1e-6);
  const labelW = 170, rowH = 18, top = 22;
  const width = Math.max(300, document.getElementById("left").clientWidth - labelW - 30);
  const x = t => labelW + (t / end) * width;
  for (let k = 0; k <= 4; k++) {
    const t = end * k / 4;
    svg.appendChild(el("svg:line", {x1: x(t), y1: 14, x2: x(t), y2: top + rows.length * rowH, stroke: "#eee"}));
    svg.appendChild(el("svg:text", {x: x(t) - 10, y: 11, "font-size": 10, fill: "#777"}, t.toFixed(2)));
  }
  rows.forEach((a, i) => {
    const y = top + i * rowH;
    const g = el("svg:g", {class: "row", "data-agent": a.id});
    g.appendChild(el("svg:rect", {class: "bg", x: 0, y: y, width: labelW + width + 10, height: rowH,
      fill: "transparent"}));
    const name = (a.role === "orchestrator" ? "orchestrator (stage " + a.stage + ")" : a.id);
    g.appendChild(el("svg:text", {x: 4, y: y + 13, "font-size": 11, fill: a.critical ? "var(--crit)" : "#333"}, name));
    for (const st of a.steps) {
      const w = Math.max(2, x(st.ended) - x(st.started));
      g.appendChild(el("svg:rect", {x: x(st.started), y: y + 3, width: w, height: rowH - 6, rx: 2,
        fill: st.critical ? "var(--crit)" : (a.role === "orchestrator" ? "var(--orch)" : "var(--node)"),
        class: st.critical ? "bar crit" : "bar"}));
    }
    g.addEventListener("click", () => show(a.id));
    svg.appendChild(g);
  });
  svg.setAttribute("width", labelW + width + 20);
  svg.setAttribute("height", top + rows.length * rowH + 6);
}

function show(id) {
  const a = agents[id];
  if (!a) return;
  const who = a.role === "orchestrator" ? "orchestrator, stage " + a.stage : a.id;
  const crit = a.critical ? " · on the critical path" : "";
  document.getElementById("ptitle").textContent = who + " · " + a.status + crit;
  document.getElementById("phint").textContent = a.error ? "error: " + a.error : "";
  const box = document.getElementById("transcript");
  box.replaceChildren();
  if (a.transcript.length === 0) box.appendChild(el("div", {class: "muted"}, "(no transcript recorded)"));
  for (const m of a.transcript) {
    const d = el("div", {class: "msg"});
    d.appendChild(el("div", {class: "role"}, m.role));
    if (m.text) d.appendChild(el("pre", {}, m.text));
    for (const c of m.calls) d.appendChild(el("pre", {class: "call"}, "→ " + c));
    box.appendChild(d);
  }
}

header(); dag(); criticalPath(); gantt();
if (D.critical_path.length) show(D.critical_path[D.critical_path.length > 1 ? 1 : 0].id);
</script>
</body>
</html>
"""
