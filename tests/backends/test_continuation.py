"""TurnMemory: when a request continues a remembered generation, and what text follows it."""

from __future__ import annotations

from agent_swarm.swarm.backend import Completion
from agent_swarm.swarm.backends.continuation import SENTINEL, TurnMemory
from agent_swarm.swarm.messages import AssistantMessage, SystemMessage, ToolCall, ToolMessage, UserMessage

CALL = ToolCall(id="c1", name="f", arguments={"x": 1})
START = (SystemMessage(content="s"), UserMessage(content="u"))
DONE = Completion(text="", tool_calls=(CALL,), prompt_token_ids=(1, 2, 3), token_ids=(7, 8, 99))


def test_a_recorded_turn_is_continued_from_its_exact_ids() -> None:
    mem = TurnMemory()
    mem.remember(START, DONE, raw_text='```json\n{"name": "f", "arguments": {"x": 1}}\n```', eog_text="<|end|>")
    follow = (
        *START,
        AssistantMessage(content="", tool_calls=(CALL,)),
        ToolMessage(tool_call_id="c1", name="f", content="ok"),
    )
    cont = mem.continuation(follow)
    assert cont is not None and cont.base_ids == (1, 2, 3, 7, 8, 99)
    assert cont.probe[2] == AssistantMessage(content=SENTINEL) and cont.probe[3] == follow[3]
    # The sampled end-of-turn token is already in base_ids, so its text is cut from the suffix.
    assert cont.suffix(f"<s>u{SENTINEL}<|end|>\n<tool>ok<|end|>\n<a>") == "\n<tool>ok<|end|>\n<a>"
    assert cont.suffix("a template that dropped the sentinel") is None


def test_no_continuation_when_the_history_is_not_what_was_sampled() -> None:
    mem = TurnMemory()
    mem.remember(START, DONE, raw_text="raw", eog_text="")
    other_call = ToolCall(id="zz", name="f", arguments={})
    assert mem.continuation((*START, AssistantMessage(content="", tool_calls=(other_call,)))) is None
    assert (
        mem.continuation(
            (SystemMessage(content="other"), UserMessage(content="u"), AssistantMessage(content="", tool_calls=(CALL,)))
        )
        is None
    )
    assert mem.continuation(START) is None  # no assistant turn yet
    # Plain text recorded either raw or parsed continues.
    mem.remember(START, Completion(text="hi", prompt_token_ids=(1,), token_ids=(2,)), raw_text="hi ", eog_text="")
    assert (
        mem.continuation(
            (*START, AssistantMessage(content="hi ")),
        )
        is not None
    )


def test_memory_is_bounded_and_skips_turns_without_ids() -> None:
    mem = TurnMemory(capacity=2)
    for i in range(3):
        mem.remember((UserMessage(content=str(i)),), DONE, raw_text="", eog_text="")
    assert mem.continuation((UserMessage(content="0"), AssistantMessage(content="", tool_calls=(CALL,)))) is None
    assert mem.continuation((UserMessage(content="2"), AssistantMessage(content="", tool_calls=(CALL,)))) is not None
    mem.remember((UserMessage(content="x"),), Completion(text="t"), raw_text="t", eog_text="")
    assert mem.continuation((UserMessage(content="x"), AssistantMessage(content="t"))) is None


def test_every_sample_of_one_prompt_is_continued_not_only_the_last() -> None:
    # An RL group samples K turns from one prompt at once: keeping only the latest generation per
    # prompt made 3 of 4 samples of a real 0.5B group re-render their first turn and drift.
    mem = TurnMemory()
    samples = [
        Completion(
            text=f"junk {k}",
            tool_calls=(ToolCall(id=f"c{k}", name="f", arguments={"k": k}),),
            prompt_token_ids=(1, 2, 3),
            token_ids=(10 + k, 99),
        )
        for k in range(4)
    ]
    for c in samples:
        mem.remember(START, c, raw_text=f"raw {c.text}", eog_text="")
    for k, c in enumerate(samples):
        follow = (
            *START,
            AssistantMessage(content=c.text, tool_calls=c.tool_calls),
            ToolMessage(tool_call_id=f"c{k}", name="f", content="ok"),
        )
        cont = mem.continuation(follow)
        assert cont is not None and cont.base_ids == (1, 2, 3, 10 + k, 99)


def test_the_bound_counts_generations_not_prompts() -> None:
    mem = TurnMemory(capacity=3, per_prompt=2)
    calls = [ToolCall(id=f"c{k}", name="f", arguments={}) for k in range(3)]
    for c in calls:  # one prompt, three samples: the oldest is dropped
        mem.remember(START, Completion(text="", tool_calls=(c,), prompt_token_ids=(1,), token_ids=(2,)), "", "")
    assert mem.continuation((*START, AssistantMessage(content="", tool_calls=(calls[0],)))) is None
    assert mem.continuation((*START, AssistantMessage(content="", tool_calls=(calls[2],)))) is not None
    for i in range(2):  # two more prompts: the first prompt's two samples go with it
        mem.remember((UserMessage(content=str(i)),), DONE, raw_text="", eog_text="")
    assert mem.continuation((*START, AssistantMessage(content="", tool_calls=(calls[2],)))) is None
    assert mem.continuation((UserMessage(content="1"), AssistantMessage(content="", tool_calls=(CALL,)))) is not None
