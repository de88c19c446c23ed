"""Token-in/token-out across turns: continue a conversation from the exact ids the engine sampled.

Re-rendering an agent's own earlier output through the chat template changes its token ids whenever
the runtime records that output differently from how it was sampled (a tool call written as fenced
JSON is recorded as a parsed call and re-rendered as a ``<tool_call>`` tag), and sometimes even for
plain text (BPE merges across the boundary). That corrupts RL importance ratios ("retokenization
drift"). :class:`TurnMemory` keeps, per conversation prefix, the prompt ids and sampled ids of each
generation; when the next request extends that conversation, its prompt is

    previous prompt ids + previous sampled ids + ids of the template text of the new messages

where the new messages' text is cut from a rendering in which the earlier output is a sentinel. So
the model sees the tokens it sampled, and each turn's prompt extends the previous one exactly.
Engines supply rendering and tokenization (llama.cpp endpoints, vLLM's tokenizer).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

from agent_swarm.swarm.backend import Completion
from agent_swarm.swarm.messages import AssistantMessage, Message, MessageAdapter

__all__ = ["SENTINEL", "Continuation", "TurnMemory"]

SENTINEL = "\u27e6swarm-sampled-turn\u27e7"


@dataclass(frozen=True)
class _Turn:
    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    eog_text: str
    texts: tuple[str, ...]
    call_ids: tuple[str, ...]

    def produced(self, m: Message) -> bool:
        """Whether ``m`` is how the runtime recorded this turn's output."""
        if not isinstance(m, AssistantMessage):
            return False
        return tuple(c.id for c in m.tool_calls) == self.call_ids and m.content in self.texts


@dataclass(frozen=True)
class Continuation:
    """How to build the next prompt: render ``probe`` (sentinel in place of the sampled turn), then
    ``ids(rendered)`` = ``base_ids`` + tokenize(:meth:`suffix` of the rendering)."""

    probe: tuple[Message, ...]
    base_ids: tuple[int, ...]
    eog_text: str

    def suffix(self, rendered: str) -> str | None:
        """The template text after the sampled turn, or ``None`` if the sentinel did not survive."""
        at = rendered.find(SENTINEL)
        if at < 0:
            return None
        tail = rendered[at + len(SENTINEL) :]
        if self.eog_text and tail.startswith(self.eog_text):
            tail = tail[len(self.eog_text) :]  # the sampled end-of-turn token is already in base_ids
        return tail


def _digest(messages: tuple[Message, ...]) -> str:
    h = hashlib.sha256()
    for m in messages:
        h.update(MessageAdapter.dump_json(m))
        h.update(b"\x00")
    return h.hexdigest()


class TurnMemory:
    """A bounded LRU of generations keyed by the conversation that prompted them.

    One prompt can have several generations: the K samples of an RL group share their first prompt
    (and greedy runs of one task share every prompt), so each key keeps a short list and the one
    that produced the conversation's last assistant message is continued. Keeping only the latest
    generation per prompt made K - 1 of every K samples re-render their turn and drift."""

    def __init__(self, capacity: int = 4096, per_prompt: int = 64) -> None:
        self.capacity = capacity
        self.per_prompt = per_prompt
        self._turns: OrderedDict[str, list[_Turn]] = OrderedDict()
        self._size = 0
        self.continued = 0
        """Prompts built by continuation (the rest were rendered fresh)."""

    def continuation(self, messages: tuple[Message, ...]) -> Continuation | None:
        """How to continue ``messages`` from a remembered generation, if one produced its last
        assistant message."""
        last = max((i for i, m in enumerate(messages) if isinstance(m, AssistantMessage)), default=None)
        if last is None:
            return None
        key = _digest(messages[:last])
        turns = self._turns.get(key)
        if turns is None:
            return None
        prev = next((t for t in reversed(turns) if t.produced(messages[last])), None)
        if prev is None:
            return None
        self._turns.move_to_end(key)
        probe = (*messages[:last], AssistantMessage(content=SENTINEL), *messages[last + 1 :])
        return Continuation(probe, prev.prompt_ids + prev.token_ids, prev.eog_text)

    def remember(self, messages: tuple[Message, ...], completion: Completion, raw_text: str, eog_text: str) -> None:
        """Keep ``completion`` (made from ``messages``); ``eog_text`` is the text of the sampled
        end-of-turn token when the generation ended on one, else ``""``."""
        if completion.prompt_token_ids is None or completion.token_ids is None:
            return
        turn = _Turn(
            completion.prompt_token_ids,
            completion.token_ids,
            eog_text,
            (raw_text, completion.text),
            tuple(c.id for c in completion.tool_calls),
        )
        key = _digest(messages)
        turns = self._turns.get(key)
        if turns is None:
            turns = self._turns[key] = []
        else:
            self._turns.move_to_end(key)
        turns.append(turn)
        self._size += 1
        if len(turns) > self.per_prompt:
            del turns[0]
            self._size -= 1
        while self._size > self.capacity:
            _, dropped = self._turns.popitem(last=False)
            self._size -= len(dropped)
