"""Chat encoding against the official DeepSeek-V4 `encoding/encoding_dsv4.py`.

Every expected prompt here was written by DeepSeek's own encoder, not by ours: `fixtures/dsv4_encoding/` holds the
four published golden pairs of the model repository (`encoding/tests/test_{input,output}_N`, transcribed; the
outputs have the published lengths 2281 / 342 / 3021 / 1125 characters), and the inline strings are outputs of the
official Python on the message lists beside them, as published by independent ports that test against it.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from dsv4_model.encoding import MAX_EFFORT, encode_messages, parse_completion, parse_message_from_completion_text
from dsv4_model.tokenizer import ByteTokenizer

FIXTURES = Path(__file__).parent / "fixtures" / "dsv4_encoding"
B, E = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
SYS = {"role": "system", "content": "You are a helpful assistant."}


def fixture(n: int) -> tuple[list[dict], str]:
    data = json.loads((FIXTURES / f"test_input_{n}.json").read_text(encoding="utf-8"))
    if n == 1:                                   # the official test attaches the tools to the first message
        data["messages"][0]["tools"] = data["tools"]
        data = data["messages"]
    return data, (FIXTURES / f"test_output_{n}.txt").read_text(encoding="utf-8")


def call(name: str, arguments: str, cid: str | None = None) -> dict:
    tc = {"type": "function", "function": {"name": name, "arguments": arguments}}
    return {"id": cid, **tc} if cid else tc


def tool(name: str, props: dict) -> dict:
    return {"type": "function", "function": {"name": name, "description": f"{name} tool",
                                             "parameters": {"type": "object", "properties": props}}}


# ------------------------------------------------------------------------------------ the official golden fixtures

@pytest.mark.parametrize("n,mode", [(1, "thinking"), (2, "thinking"), (3, "thinking"), (4, "chat")])
def test_official_fixture(n, mode):
    messages, gold = fixture(n)
    assert encode_messages(messages, thinking_mode=mode) == gold


def test_official_output_2_drops_earlier_reasoning():
    messages, _ = fixture(2)
    assert encode_messages(messages, "thinking") == (
        f"{B}You are a helpful assistant.<｜User｜>Hello<｜Assistant｜></think>Hi there! How can I help you?{E}"
        "<｜User｜>What is the capital of France?<｜Assistant｜><think>The user asks about the capital of France. "
        f"It is Paris.</think>The capital of France is Paris.{E}")


def test_official_fixture_turns_parse_back():
    """The official test's own round trip: the assistant turns sliced out of the golden prompts parse back."""
    _, gold = fixture(1)
    marker = "<｜Assistant｜><think>"
    start = gold.find(marker) + len(marker)
    first = parse_completion(gold[start:gold.find("<｜User｜>", start)], "thinking")
    assert first["reasoning_content"] == "The user wants to know the weather in Beijing. I should use the get_weather tool."
    assert first["content"] == "" and len(first["tool_calls"]) == 1
    fn = first["tool_calls"][0]["function"]
    assert fn["name"] == "get_weather" and json.loads(fn["arguments"]) == {"location": "Beijing", "unit": "celsius"}
    final = parse_completion(gold[gold.rfind(marker) + len(marker):], "thinking")
    assert final == {"role": "assistant", "reasoning_content": "Got the weather data. Let me format a nice response.",
                     "content": "The weather in Beijing is currently sunny with a temperature of 22°C and 45% humidity.",
                     "tool_calls": []}
    _, gold3 = fixture(3)
    start = gold3.find(marker) + len(marker)
    tc = parse_message_from_completion_text(gold3[start:gold3.find("<｜User｜>", start)], "thinking")
    assert tc["tool_calls"][0]["function"] == {"name": "search", "arguments": '{"queries": "小柴胡冲剂 布洛芬 相互作用 一起吃"}'}
    _, gold4 = fixture(4)
    start = gold4.find("<｜Assistant｜></think>") + len("<｜Assistant｜></think>")
    assert "热海" in parse_completion(gold4[start:gold4.find("<｜User｜>", start)], "chat")["content"]


# ------------------------------------------------------------------------------------ merging and roles

def test_consecutive_user_messages_merge_into_one_turn():
    got = encode_messages([SYS, {"role": "user", "content": "One"}, {"role": "user", "content": "Two"}], "chat")
    assert got == f"{B}You are a helpful assistant.<｜User｜>One\n\nTwo<｜Assistant｜></think>"


def test_user_after_a_tool_result_joins_its_turn():
    msgs = [{"role": "user", "content": "Q"},
            {"role": "assistant", "content": "", "reasoning_content": "R", "tool_calls": [call("alpha", '{"n": "1"}', "call_1")]},
            {"role": "tool", "content": "result", "tool_call_id": "call_1"},
            {"role": "user", "content": "And now this."}]
    assert encode_messages(msgs, "thinking") == (
        f'{B}<｜User｜>Q<｜Assistant｜></think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="alpha">\n'
        '<｜DSML｜parameter name="n" string="true">1</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>'
        f"{E}<｜User｜><tool_result>result</tool_result>\n\nAnd now this.<｜Assistant｜><think>")


def test_tool_results_follow_the_call_order():
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"},
            {"role": "assistant", "content": "", "reasoning_content": "R",
             "tool_calls": [call("alpha", '{"n": "1"}', "call_A"), call("beta", '{"n": "2"}', "call_B")]},
            {"role": "tool", "content": "B result", "tool_call_id": "call_B"},
            {"role": "tool", "content": "A result", "tool_call_id": "call_A"}]
    assert encode_messages(msgs, "thinking") == (
        f'{B}S<｜User｜>Q<｜Assistant｜></think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="alpha">\n'
        '<｜DSML｜parameter name="n" string="true">1</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name="beta">\n'
        '<｜DSML｜parameter name="n" string="true">2</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>'
        f"{E}<｜User｜><tool_result>A result</tool_result>\n\n<tool_result>B result</tool_result><｜Assistant｜><think>")


def test_developer_renders_as_a_user_turn_and_is_dropped_before_the_last_user():
    assert encode_messages([SYS, {"role": "developer", "content": "Answer in one word."}], "thinking") == (
        f"{B}You are a helpful assistant.<｜User｜>Answer in one word.<｜Assistant｜><think>")
    msgs = [SYS, {"role": "developer", "content": "Answer in one word."},
            {"role": "assistant", "content": "Yes.", "reasoning_content": "Earlier reasoning."},
            {"role": "user", "content": "Again?"}]
    assert encode_messages(msgs, "thinking") == f"{B}You are a helpful assistant.Yes.{E}<｜User｜>Again?<｜Assistant｜><think>"


def test_latest_reminder():
    msgs = [SYS, {"role": "latest_reminder", "content": "2026-08-11, London"}, {"role": "user", "content": "Hello"}]
    assert encode_messages(msgs, "thinking") == (
        f"{B}You are a helpful assistant.<｜latest_reminder｜>2026-08-11, London<｜User｜>Hello<｜Assistant｜><think>")
    # A reminder after the last user turn comes after the opener, as the official places it.
    msgs = [{"role": "user", "content": "hi"}, {"role": "latest_reminder", "content": "r"}]
    assert encode_messages(msgs, "chat") == f"{B}<｜User｜>hi<｜Assistant｜></think><｜latest_reminder｜>r"


def test_task_tokens():
    def one(task, mode="chat"):
        return encode_messages([{"role": "system", "content": "S"}, {"role": "user", "content": "P", "task": task}], mode)
    assert one("query") == f"{B}S<｜User｜>P<｜query｜>"
    assert one("read_url") == f"{B}S<｜User｜>P<｜read_url｜>"
    assert one("action") == f"{B}S<｜User｜>P<｜Assistant｜></think><｜action｜>"
    assert one("action", "thinking") == f"{B}S<｜User｜>P<｜Assistant｜><think><｜action｜>"
    title = [{"role": "system", "content": "S"}, {"role": "user", "content": "P"},
             {"role": "assistant", "content": "A", "reasoning_content": "R", "task": "title"},
             {"role": "assistant", "content": "T"}]
    assert encode_messages(title, "thinking") == f"{B}S<｜User｜>P<｜Assistant｜><think>R</think>A{E}<｜title｜>T{E}"


def test_no_opener_or_task_token_before_another_user_turn():
    """The opener (or task token) is written only where the assistant speaks next: not between a user turn and a
    developer turn, nor after a task turn that a user message follows (a task turn is not merged into)."""
    assert encode_messages([{"role": "user", "content": "A"}, {"role": "developer", "content": "B"}], "chat") == (
        f"{B}<｜User｜>A<｜User｜>B<｜Assistant｜></think>")
    assert encode_messages([{"role": "user", "content": "P", "task": "query"}, {"role": "user", "content": "Q"}], "chat") == (
        f"{B}<｜User｜>P<｜User｜>Q<｜Assistant｜></think>")


def test_without_eos_and_bos_and_with_context():
    msgs = [SYS, {"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi", "wo_eos": True}]
    assert encode_messages(msgs, "chat", add_default_bos_token=False) == (
        "You are a helpful assistant.<｜User｜>Hello<｜Assistant｜></think>Hi")
    assert encode_messages([{"role": "user", "content": "Two"}], "chat",
                           context=[SYS, {"role": "user", "content": "One"}]) == "<｜User｜>Two<｜Assistant｜></think>"


# ------------------------------------------------------------------------------------ thinking, tools, effort

THREE_TURNS = [SYS, {"role": "user", "content": "One"},
               {"role": "assistant", "content": "First answer.", "reasoning_content": "First reasoning."},
               {"role": "user", "content": "Two"},
               {"role": "assistant", "content": "Second answer.", "reasoning_content": "Second reasoning."},
               {"role": "user", "content": "Three"}]


def test_drop_thinking_rule():
    head = f"{B}You are a helpful assistant.<｜User｜>One<｜Assistant｜>"
    assert encode_messages(THREE_TURNS, "thinking") == (
        f"{head}</think>First answer.{E}<｜User｜>Two<｜Assistant｜></think>Second answer.{E}<｜User｜>Three<｜Assistant｜><think>")
    assert encode_messages(THREE_TURNS, "thinking", drop_thinking=False) == (
        f"{head}<think>First reasoning.</think>First answer.{E}<｜User｜>Two<｜Assistant｜><think>Second reasoning.</think>"
        f"Second answer.{E}<｜User｜>Three<｜Assistant｜><think>")
    assert encode_messages(THREE_TURNS, "chat") == (
        f"{head}</think>First answer.{E}<｜User｜>Two<｜Assistant｜></think>Second answer.{E}<｜User｜>Three<｜Assistant｜></think>")


def test_tools_switch_drop_thinking_off():
    echo = {"type": "function", "function": {"name": "echo", "description": "Echo the text back.", "parameters": {
        "type": "object", "properties": {"text": {"type": "string", "description": "The text"}}, "required": ["text"]}}}
    turns = [{"role": "system", "content": "S", "tools": [echo]}, {"role": "user", "content": "One"},
             {"role": "assistant", "content": "First answer.", "reasoning_content": "First reasoning."},
             {"role": "user", "content": "Two"}]
    got = encode_messages(turns, "thinking")
    assert got.startswith(f"{B}S\n\n## Tools\n\nYou have access to a set of tools")
    assert got.endswith(
        '### Available Tool Schemas\n\n{"name": "echo", "description": "Echo the text back.", "parameters": {"type": "object", '
        '"properties": {"text": {"type": "string", "description": "The text"}}, "required": ["text"]}}\n\nYou MUST strictly '
        "follow the above defined tool name and parameter schemas to invoke tool calls.\n<｜User｜>One<｜Assistant｜><think>"
        f"First reasoning.</think>First answer.{E}<｜User｜>Two<｜Assistant｜><think>")
    turns[0] = {"role": "system", "content": "S"}
    assert encode_messages(turns, "thinking") == f"{B}S<｜User｜>One<｜Assistant｜></think>First answer.{E}<｜User｜>Two<｜Assistant｜><think>"


def test_response_format():
    msgs = [{"role": "system", "content": "S", "response_format": {"type": "json_object", "path": "a/b"}},
            {"role": "user", "content": "Q"}]
    assert encode_messages(msgs, "chat") == (
        f"{B}S\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
        '{"type": "json_object", "path": "a/b"}<｜User｜>Q<｜Assistant｜></think>')


def test_reasoning_effort_is_the_official_text():
    msgs = [SYS, {"role": "user", "content": "Hello"}]
    assert encode_messages(msgs, "thinking", reasoning_effort="max") == (
        f"{B}Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
        "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, "
        "rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\n"
        "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
        "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n"
        "You are a helpful assistant.<｜User｜>Hello<｜Assistant｜><think>")
    plain = f"{B}You are a helpful assistant.<｜User｜>Hello<｜Assistant｜>"
    assert encode_messages(msgs, "thinking", reasoning_effort="high") == plain + "<think>"
    assert encode_messages(msgs, "chat", reasoning_effort="max") == plain + "</think>"
    assert MAX_EFFORT.endswith("left unchecked.\n\n")


def test_tool_call_arguments():
    msgs = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "", "reasoning_content": "R", "tool_calls": [
        call("mixed", '{"name": "a/b", "count": 7, "flag": false, "list": [1, "two"], "nested": {"k": -1}, "nothing": null}')]}]
    assert encode_messages(msgs, "thinking") == (
        f'{B}<｜User｜>Q<｜Assistant｜><think>R</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="mixed">\n'
        '<｜DSML｜parameter name="name" string="true">a/b</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="count" string="false">7</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="flag" string="false">false</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="list" string="false">[1, "two"]</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="nested" string="false">{"k": -1}</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="nothing" string="false">null</｜DSML｜parameter>\n'
        f"</｜DSML｜invoke>\n</｜DSML｜tool_calls>{E}")
    msgs[1]["tool_calls"] = [call("broken", "not json")]
    assert encode_messages(msgs, "thinking").endswith(
        '<｜DSML｜invoke name="broken">\n<｜DSML｜parameter name="arguments" string="true">not json</｜DSML｜parameter>\n'
        f"</｜DSML｜invoke>\n</｜DSML｜tool_calls>{E}")


# ------------------------------------------------------------------------------------ DSML parsing round trips

@pytest.mark.parametrize("mode", ["chat", "thinking"])
@pytest.mark.parametrize("calls", [
    [call("get_weather", '{"location": "Beijing", "unit": "celsius"}')],
    [call("alpha", '{"n": 1, "ok": true, "tags": ["x", "y"], "cfg": {"k": null}}'), call("beta", '{"q": "引号\\"内 \\n 两行"}')],
    [call("now", "{}")],                                          # no parameters: the header is followed by a blank line
])
def test_tool_calls_round_trip(mode, calls):
    """encode → the generated part → parse → the same calls; re-encoding the parsed message gives the same prompt."""
    msgs = [{"role": "system", "content": "S", "tools": [tool("get_weather", {}), tool("alpha", {})]},
            {"role": "user", "content": "Q"},
            {"role": "assistant", "content": "Let me check.", "reasoning_content": "Need a tool.", "tool_calls": calls}]
    prompt = encode_messages(msgs, mode)
    opener = "<｜Assistant｜>" + ("<think>" if mode == "thinking" else "</think>")
    generated = prompt[prompt.rindex(opener) + len(opener):]
    parsed = parse_completion(generated, mode)
    assert parsed["content"] == "Let me check."
    assert parsed["reasoning_content"] == ("Need a tool." if mode == "thinking" else "")
    assert [c["function"]["name"] for c in parsed["tool_calls"]] == [c["function"]["name"] for c in calls]
    for got, want in zip(parsed["tool_calls"], calls):
        assert json.loads(got["function"]["arguments"]) == json.loads(want["function"]["arguments"])
        assert got["function"]["arguments"] == want["function"]["arguments"]     # json.dumps spacing survives too
    assert encode_messages(msgs[:2] + [parsed], mode) == encode_messages(msgs[:2] + [{**msgs[2], **parsed}], mode)
    assert encode_messages(msgs[:2] + [{**parsed, "reasoning_content": msgs[2]["reasoning_content"]}], mode) == prompt


def test_parse_plain_answers():
    assert parse_completion(f"Paris.{E}") == {"role": "assistant", "content": "Paris.", "reasoning_content": "", "tool_calls": []}
    assert parse_completion(f"hmm</think>Paris.{E}", "thinking")["reasoning_content"] == "hmm"
    # Tool calls may end the text without EOS, as the official accepts.
    body = '\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="a" string="false">1</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>'
    assert parse_completion(body)["tool_calls"] == [{"type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]


@pytest.mark.parametrize("text,mode,match", [
    (f"no close{E}", "thinking", "not closed by </think>"),
    ("Paris.", "chat", "no <｜end▁of▁sentence｜>"),
    (f"Paris.{E}more", "chat", "unexpected text after"),
    (f"a<think>b{E}", "chat", "special token '<think>' inside the content"),
    ('\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="a">1</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>',
     "chat", "malformed parameter"),
    ('\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="a" string="true">1</｜DSML｜parameter>\n'
     '<｜DSML｜parameter name="a" string="true">2</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>', "chat", "given twice"),
    ('\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">\n</｜DSML｜invoke>\n', "chat", "not closed"),
    ('\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>tail', "chat", "after the tool calls"),
    ('\n\n<｜DSML｜tool_calls><｜DSML｜invoke name="f">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>', "chat", "expected '>\\\\n'"),
])
def test_parse_errors_are_one_line(text, mode, match):
    with pytest.raises(ValueError, match=match) as e:
        parse_completion(text, mode)
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------------------------ bad input

@pytest.mark.parametrize("messages,match", [
    ([SYS, {"role": "robot", "content": "x"}], r"message 1: unknown role 'robot' \(expected one of system, developer, user"),
    ([SYS, {"content": "x"}], r"message 1: unknown role None"),
    ([SYS, {"role": "user", "content": "a"}, {"role": "user"}], r"message 2 \(role 'user'\): missing 'content'"),
    ([{"role": "tool"}], r"message 0 \(role 'tool'\): missing 'content'"),
    ([{"role": "tool", "content": ["x"]}], r"message 0 \(role 'tool'\): 'content' must be a string or a list of block dicts"),
    ([{"role": "latest_reminder", "content": None}], r"message 0 \(role 'latest_reminder'\): 'content' is null"),
    ([{"role": "developer", "content": ""}], r"message 0 \(role 'developer'\): 'content' is empty"),
    ([{"role": "user", "content": ["a"]}], r"message 0 \(role 'user'\): 'content' must be a string, found list"),
    (["hello"], r"message 0: expected a dict"),
    ([{"role": "user", "content": "Q", "tools": [tool("f", {})]}], r"message 0 \(role 'user'\): 'tools' is only rendered"),
    ([{"role": "system", "content": "S", "tools": [{"name": "f"}]}], r"message 0 \(role 'system'\): tools\[0\] is not in OpenAI form"),
    ([{"role": "user", "content": "Q"}, {"role": "assistant", "tool_calls": [{"name": "f"}]}], r"message 1 .*tool_calls\[0\]"),
    ([{"role": "user", "content": "Q"}, {"role": "assistant", "tool_calls": [call("f", "[1, 2]")]}], r"message 1 .*JSON object"),
    ([{"role": "user", "content": "Q", "task": "summarise"}], r"message 0 \(role 'user'\): unknown task 'summarise'"),
])
def test_malformed_messages_are_one_line_errors(messages, match):
    with pytest.raises(ValueError, match=match) as e:
        encode_messages(messages, "thinking")
    assert "\n" not in str(e.value)


def test_bad_arguments():
    msgs = [{"role": "user", "content": "Q"}]
    with pytest.raises(ValueError, match="thinking_mode must be 'chat' or 'thinking', found 'think'"):
        encode_messages(msgs, "think")
    with pytest.raises(ValueError, match="reasoning_effort must be None, 'high' or 'max', found 'low'"):
        encode_messages(msgs, "thinking", reasoning_effort="low")
    with pytest.raises(ValueError, match="drop_thinking must be True or False, found"):
        encode_messages(msgs, "thinking", [SYS])                # the official's third positional is context
    with pytest.raises(ValueError, match=r"context message 0: unknown role"):
        encode_messages(msgs, "chat", context=[{"role": "bot", "content": "x"}])


def test_tool_content_blocks():
    msgs = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "", "tool_calls": [call("f", "{}", "c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]}]
    assert encode_messages(msgs, "chat").endswith(
        f"{E}<｜User｜><tool_result>a\n\n[Unsupported image]\n\nb</tool_result><｜Assistant｜></think>")


def test_input_messages_are_not_modified():
    messages, gold = fixture(1)
    before = copy.deepcopy(messages)
    assert encode_messages(messages, "thinking") == gold == encode_messages(messages, "thinking")
    assert messages == before


def test_prompt_survives_the_byte_tokenizer():
    """Every framing string of the encoding is one special token of the tokenizer; the prompt decodes unchanged."""
    tok = ByteTokenizer()
    _, gold = fixture(3)
    ids = tok.encode(gold)
    assert tok.decode(ids) == gold
    for s in (B, E, "<｜User｜>", "<｜Assistant｜>", "<｜latest_reminder｜>", "<think>", "</think>", "｜DSML｜", "<｜action｜>"):
        assert len(tok.encode(s)) == 1, s
