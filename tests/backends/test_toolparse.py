"""The tolerant tool-call parser: the shapes small models really write, and broken ones."""

from __future__ import annotations

import json

import pytest

from agent_swarm.swarm.backend import ToolSpec
from agent_swarm.swarm.backends.toolparse import action_grammar, action_schema, constrained_answer, parse_tool_calls

KNOWN = ["get_weather", "assign_task"]


def test_hermes_tags_several_calls_and_text_around() -> None:
    out = parse_tool_calls(
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}</tool_call>',
        KNOWN,
    )
    assert out.parse_error is None
    assert [(c.name, c.arguments) for c in out.tool_calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Oslo"}),
    ]
    assert out.text == "Let me check."
    assert len({c.id for c in out.tool_calls}) == 2


def test_unclosed_final_tag_is_accepted() -> None:
    out = parse_tool_calls('<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}', KNOWN)
    assert [c.arguments for c in out.tool_calls] == [{"city": "Rome"}]


def test_fenced_json_object_and_list() -> None:
    one = parse_tool_calls('Sure:\n```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```\nok', KNOWN)
    assert [c.name for c in one.tool_calls] == ["get_weather"] and one.text == "Sure:\n\nok"
    many = parse_tool_calls(
        '```\n[{"name": "assign_task", "arguments": {"agent": "w", "task": "a"}},'
        ' {"name": "assign_task", "arguments": {"agent": "w", "task": "b"}}]\n```',
        KNOWN,
    )
    assert [c.arguments["task"] for c in many.tool_calls] == ["a", "b"]


def test_bare_json_call_and_openai_wire_shape() -> None:
    bare = parse_tool_calls('I will call {"name": "get_weather", "parameters": {"city": "Lima"}} now', KNOWN)
    assert [(c.name, c.arguments) for c in bare.tool_calls] == [("get_weather", {"city": "Lima"})]
    assert bare.text == "I will call  now"
    wire = parse_tool_calls('{"type": "function", "function": {"name": "get_weather", "arguments": "{}"}}', KNOWN)
    assert [(c.name, c.arguments) for c in wire.tool_calls] == [("get_weather", {})]


def test_plain_json_data_in_an_answer_is_not_a_call() -> None:
    out = parse_tool_calls('The result is {"name": "Alice", "age": 3}.', KNOWN)
    assert out.tool_calls == () and out.parse_error is None and out.text.startswith("The result")


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ('<tool_call>{"name": "get_weather", "arguments": {"city": }</tool_call>', "invalid"),
        ('<tool_call>{"arguments": {"city": "x"}}</tool_call>', '"name"'),
        ('<tool_call>{"name": "get_weather", "arguments": [1, 2]}</tool_call>', "must be a JSON object"),
        ('```json\n{"name": "get_weather", "arguments": {"city": "Paris"\n```', "fenced tool-call JSON is invalid"),
        ('{"name": "get_weather", "arguments": {"city": "Paris"', "not valid JSON"),
    ],
)
def test_broken_calls_set_a_parse_error_the_model_can_act_on(raw: str, fragment: str) -> None:
    out = parse_tool_calls(raw, KNOWN)
    assert out.tool_calls == ()
    assert out.parse_error is not None and fragment in out.parse_error


def test_constrained_action_objects() -> None:
    calls = parse_tool_calls('{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}', KNOWN)
    assert [c.arguments for c in calls.tool_calls] == [{"city": "Oslo"}]
    answer = parse_tool_calls('{"answer": "It is 4."}', KNOWN)
    assert answer.tool_calls == () and answer.text == "It is 4." and answer.answer == "It is 4."


def test_action_schema_lists_each_tool_with_its_parameters() -> None:
    spec = ToolSpec(name="get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}})
    schema = action_schema([spec])
    single, calls, answer = schema["anyOf"]
    item = calls["properties"]["tool_calls"]["items"]["anyOf"][0]
    assert item == single  # one bare call, as chat templates teach, or a list of them
    assert item["properties"]["name"] == {"const": "get_weather"}
    assert item["properties"]["arguments"] == {**spec.parameters, "additionalProperties": False}
    assert answer["required"] == ["answer"]
    assert all("answer" not in v["properties"] for v in action_schema([spec], allow_answer=False)["anyOf"])
    # Every shape the schema admits parses back to the same call.
    for text in (
        '{"name": "get_weather", "arguments": {"city": "Oslo"}}',
        '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}',
    ):
        parsed = parse_tool_calls(text, {"get_weather"})
        assert parsed.parse_error is None and [(c.name, c.arguments) for c in parsed.tool_calls] == [
            ("get_weather", {"city": "Oslo"})
        ]


def test_constrained_schema_forbids_invented_argument_keys_and_allows_answer_only_without_tools() -> None:
    spec = ToolSpec(name="assign_task", parameters={"type": "object", "properties": {"agent": {"type": "string"}}})
    item = action_schema([spec])["anyOf"][1]["properties"]["tool_calls"]["items"]["anyOf"][0]
    assert item["properties"]["arguments"]["additionalProperties"] is False
    assert action_schema([]) == {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    assert constrained_answer('{"answer": "Paris"}') == "Paris"
    assert constrained_answer("plain text") == "plain text"


def test_an_unfinished_last_call_is_dropped_only_when_the_output_was_cut() -> None:
    text = (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "argu'
    )
    cut = parse_tool_calls(text, KNOWN, truncated=True)
    assert cut.parse_error is None and [c.arguments for c in cut.tool_calls] == [{"city": "Paris"}]
    only = parse_tool_calls('<tool_call>\n{"name": "get_weather", "argu', KNOWN, truncated=True)
    assert only.tool_calls == () and only.parse_error is not None and "cut off" in only.parse_error
    whole = parse_tool_calls(text, KNOWN)  # not cut: the model wrote broken JSON, it must hear so
    assert whole.tool_calls == () and whole.parse_error is not None and "invalid" in whole.parse_error


def test_tagged_and_bare_calls_in_one_message_are_all_taken() -> None:
    out = parse_tool_calls(
        '<tool_call>\n{"name": "assign_task", "arguments": {"agent": "w", "task": "a"}}\n</tool_call>\n'
        '{"name": "assign_task", "arguments": {"agent": "w", "task": "b"}}',
        KNOWN,
    )
    assert out.parse_error is None and [c.arguments["task"] for c in out.tool_calls] == ["a", "b"]
    assert out.text == ""


def test_action_grammar_admits_calls_tagged_or_bare_or_a_plain_answer() -> None:
    spec = ToolSpec(name="get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}})
    g = action_grammar([spec], open_tag=151657, close_tag=151658)
    assert g.startswith("%llguidance {}\n")
    assert "start: calls | ANSWER" in g
    assert 'call: <[151657]> "\\n" body "\\n" <[151658]> | body' in g  # the tags as the model's own tokens
    assert 'calls: call ("\\n" call)* "\\n"?' in g  # any number of calls, one per line
    assert '"additionalProperties": false' in g and '{"const": "get_weather"}' in g
    forced = action_grammar([spec], allow_answer=False)
    assert "start: calls\n" in forced and "ANSWER" not in forced
    assert 'call: "<tool_call>" "\\n"' in forced  # no single-token tag: the literal text
    assert action_grammar([]) == "%llguidance {}\nstart: /[^\\s<{\\[`](.|\\n)*/\n"  # final turn: text only
    # parallel_tool_calls=False: one call, then the turn ends; the answer stays allowed
    one = action_grammar([spec], one_call=True)
    assert 'calls: call "\\n"?' in one and "start: calls | ANSWER" in one and 'call ("\\n" call)*' not in one


def test_one_call_schema_has_no_list_of_calls() -> None:
    spec = ToolSpec(name="f", parameters={"type": "object", "properties": {}})
    assert "tool_calls" in json.dumps(action_schema([spec]))
    one = action_schema([spec], one_call=True)
    assert "tool_calls" not in json.dumps(one) and {v["required"][0] for v in one["anyOf"]} == {"name", "answer"}


def test_several_call_objects_in_one_fence_are_several_calls() -> None:
    # The 1.5B as a single agent on BFCL wrote two bare objects in one ```json fence; the whole
    # episode failed as "malformed" after two retries.
    text = (
        '```json\n{\n  "name": "math_gcd",\n  "arguments": {"num1": 36, "num2": 48}\n}\n'
        '{\n  "name": "math_gcd",\n  "arguments": {"num1": 60, "num2": 96}\n}\n```'
    )
    out = parse_tool_calls(text, ["math_gcd"])
    assert out.parse_error is None
    assert [(c.name, c.arguments) for c in out.tool_calls] == [
        ("math_gcd", {"num1": 36, "num2": 48}),
        ("math_gcd", {"num1": 60, "num2": 96}),
    ]
    # Text between the objects is not a list of calls: still the error the model is told about.
    broken = parse_tool_calls('```json\n{"name": "math_gcd", "arguments": {}} and {"name": "x"}\n```', ["math_gcd"])
    assert broken.tool_calls == () and broken.parse_error is not None and "invalid" in broken.parse_error


def test_several_call_objects_in_one_tag_are_several_calls() -> None:
    # SmolLM2 copied the coach's split calls (a JSON object a line) into one <tool_call> block.
    a = '{"name": "assign_task", "arguments": {"agent": "w", "task": "a"}}'
    b = '{"name": "assign_task", "arguments": {"agent": "w", "task": "b"}}'
    out = parse_tool_calls(f"<tool_call>\n{a}\n{b}\n</tool_call>", KNOWN)
    assert out.parse_error is None and [c.arguments["task"] for c in out.tool_calls] == ["a", "b"]
    # words between the objects are no list of calls; an empty block is no call
    for raw in (f"<tool_call>{a} then {b}</tool_call>", "<tool_call></tool_call>"):
        broken = parse_tool_calls(raw, KNOWN)
        assert broken.tool_calls == () and broken.parse_error is not None and "invalid" in broken.parse_error
    # cut at the token limit inside the second object: the first stands; not cut, the model hears of it
    cut_text = f'<tool_call>\n{a}\n{{"name": "assign_task", "arguments": {{"agent": "w", "task": "b'
    cut = parse_tool_calls(cut_text, KNOWN, truncated=True)
    assert cut.parse_error is None and [c.arguments["task"] for c in cut.tool_calls] == ["a"]
    whole = parse_tool_calls(cut_text, KNOWN)
    assert whole.tool_calls == () and whole.parse_error is not None and "invalid" in whole.parse_error
