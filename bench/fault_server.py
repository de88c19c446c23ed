"""A fault-injecting OpenAI-compatible chat-completions server that plays a fresh fan-out policy.

It is the model for the soak (``bench/soak.py``): the orchestrator's first turn creates a sub-agent type
and fans out ``--fanout`` ``assign_task`` calls (unique call ids, a different multiplication per item);
each sub-agent answers its item; the orchestrator re-assigns items whose result it did not get (and
sometimes re-checks a random handful) in later stages, then answers with the sum of the products.
Nothing is canned: every response is built from the request it answers, so ids and arguments are
fresh per call. The orchestrator's completions carry vLLM-style exact token ids and logprobs from a
word-hash tokenizer applied per message, which is prefix-stable: a turn's prompt ids extend the
previous prompt and response ids exactly, so episodes become valid trajectories.

Faults, drawn per request (independently of the policy): ``--p500`` HTTP 500, ``--p429`` HTTP 429 with a
short Retry-After, ``--pbody`` a 200 whose body is an HTML error page, ``--pmalformed`` a 200 with one
tool call whose arguments are broken JSON (among valid ones in a fan-out turn, alone otherwise),
``--phang`` no answer for ``--hang-s`` seconds (longer than the client's timeout). Every request is
logged as one JSON line (time, agent kind, body hash, the episode's seed, the worker's item, fault, and
for hangs how long until the client gave up) so the soak can check that every retryable fault was
retried and every hang bounded.

    python bench/fault_server.py --port 0 --log server.jsonl --fanout 1024    # prints its URL

Raw asyncio HTTP/1.1 with keep-alive (no framework): the server must stay cheap next to the runtime
it loads on a shared 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import re
import signal
import sys
import time
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any

ORCHESTRATOR_MARK = "orchestrator of a swarm"  # in the runtime's default orchestrator system prompt
WORKER_PROMPT = "You multiply two integers. Reply exactly 'item N = PRODUCT'."
_ITEM_RE = re.compile(r"item (\d+): multiply (-?\d+) by (-?\d+)")
_EPISODE_RE = re.compile(r"\[episode (-?\d+)\]")  # the orchestrator's seed, in each item it assigns
_RESULT_RE = re.compile(r"item (\d+) = (-?\d+)")
_TASK_RE = re.compile(r"\[task (\S+)\] multiply these pairs and add up the products: (.*)", re.S)


# -- the tokenizer: words hashed to ids, one message at a time (prefix-stable) -------------------------


def tokens(text: str) -> list[int]:
    return [100 + zlib.crc32(w.encode()) % 50_000 for w in text.split()]


def _canonical_call(c: dict[str, Any]) -> str:
    fn = c.get("function") or {}
    args = fn.get("arguments")
    try:
        parsed = json.loads(args) if isinstance(args, str) else args
    except ValueError:
        parsed = args
    return f"<call> {c.get('id')} {fn.get('name')} {json.dumps(parsed, sort_keys=True, ensure_ascii=False)}"


def _body(content: str | None, calls: list[dict[str, Any]]) -> str:
    return " ".join([content or "", *(_canonical_call(c) for c in calls)])


def prompt_ids(messages: list[dict[str, Any]]) -> list[int]:
    ids: list[int] = []
    for m in messages:
        ids += tokens(f"<|{m.get('role')}|>")
        if m.get("role") == "assistant":
            ids += tokens(_body(m.get("content"), m.get("tool_calls") or []))
        else:
            ids += tokens(str(m.get("content") or ""))
        ids += tokens("<|end|>")
    return ids + tokens("<|assistant|>")


def response_ids(content: str, calls: list[dict[str, Any]]) -> list[int]:
    return tokens(_body(content, calls)) + tokens("<|end|>")


# -- the policy -------------------------------------------------------------------------------------


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"call_{uuid.uuid4().hex[:20]}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


@dataclass
class Policy:
    fanout: int
    rng: random.Random = field(default_factory=random.Random)

    def orchestrator(self, messages: list[dict[str, Any]], seed: Any = None) -> tuple[str, list[dict[str, Any]]]:
        user = next(str(m.get("content")) for m in messages if m.get("role") == "user")
        match = _TASK_RE.search(user)
        pairs = [tuple(map(int, p.split("x"))) for p in match.group(2).split(",")] if match else [(1, 1)]
        agent = next(
            (
                json.loads(c["function"]["arguments"]).get("name")
                for m in messages
                if m.get("role") == "assistant"
                for c in m.get("tool_calls") or []
                if c["function"]["name"] == "create_subagent" and _json_ok(c["function"]["arguments"])
            ),
            None,
        )
        got: dict[int, int] = {}
        for m in messages:
            if m.get("role") == "tool":
                for i, v in _RESULT_RE.findall(str(m.get("content"))):
                    got[int(i)] = int(v)
        turns = sum(1 for m in messages if m.get("role") == "assistant")
        calls: list[dict[str, Any]] = []
        if agent is None:
            agent = f"mul{uuid.uuid4().hex[:6]}"
            calls.append(_call("create_subagent", {"name": agent, "system_prompt": WORKER_PROMPT}))
            todo = list(range(len(pairs)))
        else:
            todo = [i for i in range(len(pairs)) if i not in got]
            if not todo and turns < 3 and self.rng.random() < 0.3:  # re-check a random handful
                todo = self.rng.sample(range(len(pairs)), min(len(pairs), self.rng.randint(1, 64)))
        if not todo or turns >= 4:
            total = sum(got.get(i, 0) for i in range(len(pairs)))
            return f"{len(got)} of {len(pairs)} products in. Answer: {total}", []
        for i in todo:
            a, b = pairs[i]
            task = f"item {i}: multiply {a} by {b} [episode {seed}]"  # the log ties the worker's calls to it
            calls.append(_call("assign_task", {"agent": agent, "task": task}))
        return "", calls

    def worker(self, messages: list[dict[str, Any]]) -> str:
        user = next(str(m.get("content")) for m in messages if m.get("role") == "user")
        match = _ITEM_RE.search(user)
        if match is None:
            return "I could not read the item."
        i, a, b = (int(x) for x in match.groups())
        return f"item {i} = {a * b}"


def _json_ok(text: Any) -> bool:
    try:
        json.loads(text)
    except (TypeError, ValueError):
        return False
    return True


# -- faults and the HTTP server ----------------------------------------------------------------------


@dataclass
class Faults:
    p500: float
    p429: float
    pbody: float
    pmalformed: float
    phang: float
    hang_s: float
    rng: random.Random

    def draw(self) -> str:
        x = self.rng.random()
        for name, p in (
            ("500", self.p500),
            ("429", self.p429),
            ("body", self.pbody),
            ("malformed", self.pmalformed),
            ("hang", self.phang),
        ):
            if x < p:
                return name
            x -= p
        return ""


class Server:
    def __init__(self, policy: Policy, faults: Faults, log: Any) -> None:
        self.policy, self.faults, self.log = policy, faults, log
        self.requests = 0

    def _log(self, entry: dict[str, Any]) -> None:
        self.log.write(json.dumps(entry, separators=(",", ":")) + "\n")

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                if not await self.respond(method, path, body, reader, writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def respond(
        self, method: str, path: str, body: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Answer one request; False closes the connection."""
        if method == "GET" and path.rstrip("/").endswith("/v1/models"):
            return await self._send(writer, 200, {"object": "list", "data": [{"id": "soak", "object": "model"}]})
        if method != "POST" or not path.rstrip("/").endswith("/chat/completions"):
            return await self._send(writer, 404, {"error": f"no route {method} {path}"})
        self.requests += 1
        t0 = time.time()
        req = json.loads(body)
        messages = req.get("messages") or []
        system = str(messages[0].get("content")) if messages else ""
        kind = "o" if ORCHESTRATOR_MARK in system else "s"
        fault = self.faults.draw()
        entry: dict[str, Any] = {
            "t": round(t0, 4),
            "k": kind,
            "h": hashlib.sha1(body).hexdigest()[:16],
            "seed": req.get("seed"),
            "f": fault,
        }
        user = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
        if kind == "o" and sum(1 for m in messages if m.get("role") == "assistant") == 0:
            m = _TASK_RE.search(user)
            entry["task"] = m.group(1) if m else None
        elif kind == "s":  # which episode and item: the soak's checker finds the sub-agent that made the call
            item, episode = _ITEM_RE.search(user), _EPISODE_RE.search(user)
            entry["i"] = int(item.group(1)) if item else None
            entry["seed"] = int(episode.group(1)) if episode else None
        self._log(entry)
        if fault == "500":
            return await self._send(writer, 500, {"error": {"message": "injected internal error"}})
        if fault == "429":
            return await self._send(writer, 429, {"error": {"message": "injected rate limit"}}, {"retry-after": "0.05"})
        if fault == "body":
            page = b"<html><body><h1>502 Bad Gateway</h1>injected</body></html>"
            return await self._send_raw(writer, 200, page, "text/html")
        if fault == "hang":
            try:  # no answer; note when the client gives up (it closes the connection)
                gone = await asyncio.wait_for(reader.read(1), self.faults.hang_s)
            except TimeoutError:
                gone = b"?"
            self._log(
                {
                    "t": round(time.time(), 4),
                    "hang_end": entry["h"],
                    "after_s": round(time.time() - t0, 3),
                    "client_closed": gone == b"",
                }
            )
            return False
        if kind == "o":
            content, calls = self.policy.orchestrator(messages, req.get("seed"))
        else:
            content, calls = self.policy.worker(messages), []
        if fault == "malformed":
            bad = _call("assign_task" if kind == "o" else "multiply", {})
            bad["function"]["arguments"] = '{"agent": "x", "task": "item 0: multiply'  # cut mid-string
            calls = [*calls[: len(calls) // 2], bad, *calls[len(calls) // 2 :]]
        message: dict[str, Any] = {"role": "assistant", "content": content or None}
        if calls:
            message["tool_calls"] = calls
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        out: dict[str, Any] = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "model": "soak"}
        if kind == "o":  # exact ids for the trainable policy's trajectories
            p_ids, r_ids = prompt_ids(messages), response_ids(content, calls)
            choice["token_ids"] = r_ids
            choice["logprobs"] = {
                "content": [{"token": f"token_id:{t}", "logprob": -0.01 * (1 + t % 7)} for t in r_ids]
            }
            out["prompt_token_ids"] = p_ids
            usage = {"prompt_tokens": len(p_ids), "completion_tokens": len(r_ids)}
        else:
            usage = {"prompt_tokens": 40 + len(body) // 8, "completion_tokens": 8}
        out["choices"] = [choice]
        out["usage"] = usage
        return await self._send(writer, 200, out)

    async def _send(
        self, writer: asyncio.StreamWriter, code: int, obj: Any, headers: dict[str, str] | None = None
    ) -> bool:
        return await self._send_raw(writer, code, json.dumps(obj).encode(), "application/json", headers)

    async def _send_raw(
        self, writer: asyncio.StreamWriter, code: int, data: bytes, ctype: str, headers: dict[str, str] | None = None
    ) -> bool:
        reason = {200: "OK", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error"}[code]
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        head = (
            f"HTTP/1.1 {code} {reason}\r\ncontent-type: {ctype}\r\ncontent-length: {len(data)}\r\n"
            f"connection: keep-alive\r\n{extra}\r\n"
        )
        writer.write(head.encode("latin-1") + data)
        await writer.drain()
        return True


async def serve(args: argparse.Namespace, log: Any) -> None:
    rng = random.Random(args.seed)
    faults = Faults(args.p500, args.p429, args.pbody, args.pmalformed, args.phang, args.hang_s, rng)
    server = Server(Policy(args.fanout, random.Random(args.seed + 1)), faults, log)
    srv = await asyncio.start_server(server.connection, args.host, args.port, backlog=4096, limit=1 << 24)
    port = srv.sockets[0].getsockname()[1]
    print(f"http://{args.host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def flush() -> None:  # the log is buffered; the soak reads it while we run
        while not stop.is_set():
            await asyncio.sleep(1.0)
            log.flush()

    async with srv, asyncio.TaskGroup() as tg:
        tg.create_task(flush())
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--log", required=True, help="JSONL request log")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fanout", type=int, default=1024)
    p.add_argument("--p500", type=float, default=0.05)
    p.add_argument("--p429", type=float, default=0.02)
    p.add_argument("--pbody", type=float, default=0.02)
    p.add_argument("--pmalformed", type=float, default=0.02)
    p.add_argument("--phang", type=float, default=0.01)
    p.add_argument("--hang-s", type=float, default=30.0, help="how long a hung request stays unanswered")
    args = p.parse_args(argv)
    with open(args.log, "a", encoding="utf-8", buffering=1 << 16) as log:
        try:
            asyncio.run(serve(args, log))
        except KeyboardInterrupt:
            sys.exit(0)


if __name__ == "__main__":
    main()
