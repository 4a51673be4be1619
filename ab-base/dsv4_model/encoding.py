"""Chat encoding of DeepSeek-V4: the behaviour of the official `encoding/encoding_dsv4.py` (spec section 9).

Prompt layout: BOS + [effort preface] + system + (<｜User｜>user <｜Assistant｜> X [reasoning</think>]content EOS)*,
X = `<think>` where the model is to reason and `</think>` where it is not. What the official code does, and so this:

- Roles: `system` (content, then its `tools` / `response_format` blocks), `developer` (rendered as a user turn that
  carries its own tools / response format), `user`, `assistant` (`reasoning_content`, `content`, `tool_calls` as
  DSML, EOS unless `wo_eos`), `tool` (there is no tool turn: results become `<tool_result>…</tool_result>` blocks of
  a user turn) and `latest_reminder` (`<｜latest_reminder｜>content`).
- Merging: a tool result joins the user turn before it (a fresh user turn when there is none); a user message joins
  the user turn before it unless that one carries a `task`; the parts of one turn are joined by a blank line. The
  tool results of one turn are put in the order the assistant made the calls (by `tool_call_id`).
- The `<｜Assistant｜>` opener follows a user/developer turn only when the next message is an assistant or a
  reminder (or there is none); a `task` replaces it with its task token (`action`: opener, think token, `<｜action｜>`).
- Drop-thinking (thinking mode, default on, switched off when any message defines tools): reasoning of assistant
  turns before the last user/developer message is removed and developer messages before it are dropped; those
  earlier user turns open `</think>`, the last one `<think>`.
- reasoning_effort: None and "high" add nothing; "max" in thinking mode puts the official preface before message 0.

Deliberate differences, all on input the official code mishandles: malformed messages are a one-line ValueError
naming the message index (the official asserts, raises KeyError or renders "None"); `tools`/`response_format` on a
role that cannot render them is an error (the official silently drops them); `reasoning` is read when
`reasoning_content` is absent (the key OpenAI-compatible servers now send); tool-call `arguments` may be a dict as
well as a JSON string; `context` is keyword-only (this module's third positional argument is `drop_thinking`).
`parse_completion` reads generated text back into content, reasoning and tool calls (the official
`parse_message_from_completion_text`, also exported under that name).
"""
from __future__ import annotations

import json
import re

from .tokenizer import BOS, EOS

USER, ASSISTANT, REMINDER = "<｜User｜>", "<｜Assistant｜>", "<｜latest_reminder｜>"
THINK, END_THINK = "<think>", "</think>"
DSML = "｜DSML｜"
TASK_TOKENS = {t: f"<｜{t}｜>" for t in ("action", "query", "authority", "domain", "title", "read_url")}
ROLES = ("system", "developer", "user", "assistant", "tool", "latest_reminder")
EFFORTS = (None, "high", "max")

# The official preface, word for word: the model was trained on this exact text.
MAX_EFFORT = (
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, "
    "rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n")

RESPONSE_FORMAT = "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"

TOOLS_PROMPT = f"""## Tools

You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "<{DSML}tool_calls>" block like the following:

<{DSML}tool_calls>
<{DSML}invoke name="$TOOL_NAME">
<{DSML}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{DSML}parameter>
...
</{DSML}invoke>
<{DSML}invoke name="$TOOL_NAME2">
...
</{DSML}invoke>
</{DSML}tool_calls>

String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.

If thinking_mode is enabled (triggered by {THINK}), you MUST output your complete reasoning inside {THINK}...{END_THINK} BEFORE any tool calls or final response.

Otherwise, output directly after {END_THINK} with tool calls or final response.

### Available Tool Schemas

{{schemas}}

You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.
"""

TOOL_CALLS_OPEN, TOOL_CALLS_CLOSE = f"<{DSML}tool_calls>", f"</{DSML}tool_calls>"
INVOKE_OPEN, INVOKE_CLOSE = f"<{DSML}invoke", f"</{DSML}invoke"
PARAM_OPEN, PARAM_CLOSE = f"<{DSML}parameter", f"/{DSML}parameter"


def _json(value) -> str:
    return json.dumps(value, ensure_ascii=False)


# ------------------------------------------------------------------------------------------------ validation

def _check(messages, where: str) -> None:
    """One-line errors for what the renderer cannot take, naming the message by its index in the caller's list."""
    if not isinstance(messages, (list, tuple)):
        raise ValueError(f"{where}: expected a list of message dicts, found {type(messages).__name__}")
    for i, m in enumerate(messages):
        at = f"{where} {i}"
        if not isinstance(m, dict):
            raise ValueError(f"{at}: expected a dict with 'role' and 'content', found {type(m).__name__}")
        role = m.get("role")
        if role not in ROLES:
            raise ValueError(f"{at}: unknown role {role!r} (expected one of {', '.join(ROLES)})")
        at = f"{at} (role {role!r})"
        content = m.get("content")
        if role in ("user", "developer", "latest_reminder", "tool") and "content" not in m:
            raise ValueError(f"{at}: missing 'content'")
        if role == "tool":
            blocks_ok = isinstance(content, list) and all(isinstance(b, dict) for b in content)
            if not (isinstance(content, str) or blocks_ok):
                raise ValueError(f"{at}: 'content' must be a string or a list of block dicts, found {content!r:.60}")
        elif content is not None and not isinstance(content, str):
            raise ValueError(f"{at}: 'content' must be a string, found {type(content).__name__}")
        elif content is None and role in ("user", "developer", "latest_reminder"):
            raise ValueError(f"{at}: 'content' is null (expected a string)")
        if role == "developer" and not content:
            raise ValueError(f"{at}: 'content' is empty (a developer message needs text)")
        for key in ("tools", "response_format"):
            if m.get(key) and role not in ("system", "developer"):
                raise ValueError(f"{at}: '{key}' is only rendered on a system or developer message")
        for j, t in enumerate(m.get("tools") or ()):
            if not (isinstance(t, dict) and isinstance(t.get("function"), dict)):
                raise ValueError(f"{at}: tools[{j}] is not in OpenAI form {{'type': 'function', 'function': {{...}}}}")
        if m.get("tool_calls"):
            if role != "assistant":
                raise ValueError(f"{at}: 'tool_calls' belong to an assistant message")
            for j, tc in enumerate(m["tool_calls"]):
                fn = tc.get("function") if isinstance(tc, dict) else None
                if not (isinstance(fn, dict) and isinstance(fn.get("name"), str)):
                    raise ValueError(f"{at}: tool_calls[{j}] is not in OpenAI form {{'function': {{'name', 'arguments'}}}}")
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        args = json.loads(args)
                    except ValueError:
                        args = {}                                   # rendered as one string parameter, as the official
                if not isinstance(args, dict):
                    raise ValueError(f"{at}: tool_calls[{j}] arguments must be a JSON object, found {args!r}")
        reasoning = m.get("reasoning_content", m.get("reasoning"))
        if reasoning is not None and not isinstance(reasoning, str):
            raise ValueError(f"{at}: 'reasoning_content' must be a string, found {type(reasoning).__name__}")
        task = m.get("task")
        if task is not None and task not in TASK_TOKENS:
            raise ValueError(f"{at}: unknown task {task!r} (expected one of {', '.join(TASK_TOKENS)})")


# ------------------------------------------------------------------------------------------------ preprocessing

def _tool_text(content) -> str:
    if isinstance(content, str):
        return content
    return "\n\n".join(b.get("text", "") if b.get("type") == "text" else f"[Unsupported {b.get('type')}]"
                       for b in content)


def _merge(messages: list[dict]) -> list[dict]:
    """Tool results and consecutive user messages folded into user turns with `blocks` (text or tool result)."""
    out: list[dict] = []
    for m in messages:
        role = m["role"]
        prev = out[-1] if out and out[-1]["role"] == "user" and "blocks" in out[-1] else None
        if role == "tool":
            text = f"<tool_result>{_tool_text(m['content'])}</tool_result>"
            block = {"tool_use_id": m.get("tool_call_id") or "", "text": text}
            if prev is not None:                     # no task check here: the official joins a result to any user turn
                prev["blocks"].append(block)
            else:
                out.append({"role": "user", "blocks": [block]})
        elif role == "user":
            block = {"text": m["content"]}
            if prev is not None and prev.get("task") is None:
                prev["blocks"].append(block)
            else:
                kept = {k: m[k] for k in ("task", "wo_eos", "mask") if k in m}   # the official keeps these only
                out.append({"role": "user", "blocks": [block], **kept})
        else:
            out.append(dict(m))
    return out


def _sort_tool_results(messages: list[dict]) -> None:
    """Put each user turn's tool results in the order of the latest assistant's calls (other blocks stay put)."""
    order: dict[str, int] = {}
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            order = {}
            for j, tc in enumerate(m["tool_calls"]):
                cid = tc.get("id") or tc["function"].get("id")
                if cid:
                    order[cid] = j
        elif m["role"] == "user" and "blocks" in m and order:
            slots = [j for j, b in enumerate(m["blocks"]) if "tool_use_id" in b]
            if len(slots) > 1:
                ordered = sorted((m["blocks"][j] for j in slots), key=lambda b: order.get(b["tool_use_id"], 0))
                for j, b in zip(slots, ordered):
                    m["blocks"][j] = b


def _last_user(messages: list[dict]) -> int:
    return max((i for i, m in enumerate(messages) if m["role"] in ("user", "developer")), default=-1)


def _drop_thinking(messages: list[dict]) -> list[dict]:
    """Before the last user/developer message: assistant reasoning removed, developer messages dropped."""
    last = _last_user(messages)
    out = []
    for i, m in enumerate(messages):
        if i >= last or m["role"] in ("user", "system", "tool", "latest_reminder"):
            out.append(m)
        elif m["role"] == "assistant":
            out.append({k: v for k, v in m.items() if k not in ("reasoning_content", "reasoning")})
    return out


# ------------------------------------------------------------------------------------------------ rendering

def render_tools(tools: list[dict]) -> str:
    """The "## Tools" section for OpenAI-form tools: one JSON line per function schema."""
    return TOOLS_PROMPT.replace("{schemas}", "\n".join(_json(t["function"]) for t in tools))


def _arguments(arguments) -> dict:
    if not isinstance(arguments, str):
        return arguments
    try:
        return json.loads(arguments)
    except ValueError:
        return {"arguments": arguments}              # not JSON: the official passes it on as one string parameter


def render_tool_calls(tool_calls: list[dict]) -> str:
    """OpenAI-form tool calls as the DSML block an assistant turn ends with (leading blank line included)."""
    invokes = []
    for tc in tool_calls:
        fn = tc["function"]
        params = "\n".join(
            f'<{DSML}parameter name="{k}" string="{"true" if isinstance(v, str) else "false"}">'
            f'{v if isinstance(v, str) else _json(v)}</{DSML}parameter>'
            for k, v in _arguments(fn.get("arguments")).items())
        invokes.append(f'<{DSML}invoke name="{fn["name"]}">\n{params}\n</{DSML}invoke>')
    return "\n\n" + TOOL_CALLS_OPEN + "\n" + "\n".join(invokes) + "\n" + TOOL_CALLS_CLOSE


def _extras(m: dict) -> str:
    out = ""
    if m.get("tools"):
        out += "\n\n" + render_tools(m["tools"])
    if m.get("response_format"):
        out += "\n\n" + RESPONSE_FORMAT + _json(m["response_format"])
    return out


def _render(i: int, msgs: list[dict], thinking: bool, drop: bool, effort: str | None, last_user: int) -> str:
    m, role = msgs[i], msgs[i]["role"]
    out = MAX_EFFORT if i == 0 and thinking and effort == "max" else ""
    if role == "system":
        out += (m.get("content") or "") + _extras(m)
    elif role == "developer":
        out += USER + m["content"] + _extras(m)
    elif role == "user":
        out += USER + "\n\n".join(b["text"] for b in m["blocks"])
    elif role == "latest_reminder":
        out += REMINDER + m["content"]
    else:                                                                   # assistant
        after_task = i > 0 and msgs[i - 1].get("task") is not None          # a task's answer carries no reasoning
        reasoning = m.get("reasoning_content", m.get("reasoning")) or ""
        keep = thinking and not after_task and (not drop or i > last_user)
        calls = render_tool_calls(m["tool_calls"]) if m.get("tool_calls") else ""
        out += (reasoning + END_THINK if keep else "") + (m.get("content") or "") + calls
        out += "" if m.get("wo_eos") else EOS
    # What comes after: nothing when another user/system/developer turn follows, else the task token or the opener.
    if i + 1 < len(msgs) and msgs[i + 1]["role"] not in ("assistant", "latest_reminder"):
        return out
    task = m.get("task")
    if task == "action":
        out += ASSISTANT + (THINK if thinking else END_THINK) + TASK_TOKENS[task]
    elif task is not None:
        out += TASK_TOKENS[task]
    elif role in ("user", "developer"):
        out += ASSISTANT + (THINK if thinking and (not drop or i >= last_user) else END_THINK)
    return out


def encode_messages(messages: list[dict], thinking_mode: str = "chat", drop_thinking: bool = True,
                    add_default_bos_token: bool = True, reasoning_effort: str | None = None, *,
                    context: list[dict] | None = None) -> str:
    """The prompt text for `messages` (OpenAI-style dicts). `context`: earlier messages already in the model's cache;
    they shape the rendering (last user turn, drop-thinking) but are not rendered, and no BOS is added."""
    if thinking_mode not in ("chat", "thinking"):
        raise ValueError(f"thinking_mode must be 'chat' or 'thinking', found {thinking_mode!r}")
    if not isinstance(drop_thinking, bool):
        raise ValueError(f"drop_thinking must be True or False, found {drop_thinking!r} (pass context= by keyword)")
    if reasoning_effort not in EFFORTS:
        raise ValueError(f"reasoning_effort must be None, 'high' or 'max', found {reasoning_effort!r}")
    context = context or []
    _check(context, "context message")
    _check(messages, "message")
    ctx, new = _merge(context), _merge(messages)
    full = ctx + new
    _sort_tool_results(full)
    thinking = thinking_mode == "thinking"
    drop = drop_thinking and not any(m.get("tools") for m in full)        # tool use keeps every turn's reasoning
    start = len(ctx)
    if thinking and drop:
        full = _drop_thinking(full)
        start = len(_drop_thinking(ctx))                                   # as the official counts it
    last_user = _last_user(full)
    prompt = BOS if add_default_bos_token and not ctx else ""
    for i in range(start, len(full)):
        prompt += _render(i, full, thinking, drop, reasoning_effort, last_user)
    return prompt


# ------------------------------------------------------------------------------------------------ parsing

def _until(text: str, pos: int, stops: tuple[str, ...]) -> tuple[str, str | None, int]:
    """(text before the earliest stop, that stop or None, position after it)."""
    hits = [(text.find(s, pos), s) for s in stops]
    hits = [(p, s) for p, s in hits if p >= 0]
    if not hits:
        return text[pos:], None, len(text)
    p, s = min(hits)
    return text[pos:p], s, p + len(s)


def _parse_tool_calls(text: str, pos: int) -> tuple[list[dict], int]:
    """The invokes of a DSML block; `pos` is just after `<｜DSML｜tool_calls`. Returns the calls and the end."""
    calls = []
    while True:
        gap, stop, pos = _until(text, pos, (INVOKE_OPEN, TOOL_CALLS_CLOSE))
        if gap != ">\n":
            raise ValueError(f"tool calls: expected '>\\n' before the next invoke or the block's end, found {gap[:40]!r}")
        if stop is None:
            raise ValueError(f"tool calls: the block is not closed by {TOOL_CALLS_CLOSE}")
        if stop == TOOL_CALLS_CLOSE:
            return calls, pos
        head, stop, pos = _until(text, pos, (PARAM_OPEN, INVOKE_CLOSE))
        name = re.fullmatch(r'\s*name="(.*?)">\n\n?', head, flags=re.DOTALL)
        if name is None or stop is None:
            raise ValueError(f"tool calls: malformed invoke header {head[:60]!r} (expected ' name=\"…\">\\n')")
        args: dict[str, tuple[str, bool]] = {}
        while stop == PARAM_OPEN:
            body, stop, pos = _until(text, pos, (PARAM_CLOSE,))
            kv = re.fullmatch(r' name="(.*?)" string="(true|false)">(.*?)<\n?', body, flags=re.DOTALL)
            if kv is None or stop is None:
                raise ValueError(f"tool calls: malformed parameter {body[:60]!r} (expected ' name=\"…\" string=\"true|false\">…<')")
            if kv[1] in args:
                raise ValueError(f"tool calls: parameter {kv[1]!r} given twice in {name[1]!r}")
            args[kv[1]] = (kv[3], kv[2] == "true")
            gap, stop, pos = _until(text, pos, (PARAM_OPEN, INVOKE_CLOSE))
            if gap != ">\n":
                raise ValueError(f"tool calls: expected '>\\n' after a parameter, found {gap[:40]!r}")
        # String values are JSON-quoted here; the others are the model's JSON text, passed on as written.
        arguments = "{" + ", ".join(f"{_json(k)}: {_json(v) if is_str else v}" for k, (v, is_str) in args.items()) + "}"
        calls.append({"type": "function", "function": {"name": name[1], "arguments": arguments}})


def parse_completion(text: str, thinking_mode: str = "chat") -> dict:
    """Generated text (what follows the prompt's `<think>` or `</think>`, EOS included) as an assistant message:
    {"role": "assistant", "content", "reasoning_content", "tool_calls": [OpenAI-form calls]}."""
    if thinking_mode not in ("chat", "thinking"):
        raise ValueError(f"thinking_mode must be 'chat' or 'thinking', found {thinking_mode!r}")
    calls_open = "\n\n" + f"<{DSML}tool_calls"
    reasoning, pos, calls = "", 0, []
    if thinking_mode == "thinking":
        reasoning, stop, pos = _until(text, pos, (END_THINK, calls_open))
        if stop != END_THINK:
            raise ValueError(f"completion: the reasoning is not closed by {END_THINK} before "
                             f"{'the tool calls' if stop else 'the end of the text'}")
    content, stop, pos = _until(text, pos, (EOS, calls_open))
    if stop is None:
        raise ValueError(f"completion: no {EOS} at the end (generation cut off?)")
    if stop == calls_open:
        calls, pos = _parse_tool_calls(text, pos)
        rest, stop, pos = _until(text, pos, (EOS,))
        if rest:
            raise ValueError(f"completion: unexpected text after the tool calls: {rest[:40]!r}")
    if pos != len(text):
        raise ValueError(f"completion: unexpected text after {EOS}: {text[pos:pos + 40]!r}")
    for tok in (BOS, EOS, THINK, END_THINK, DSML):
        if tok in content or tok in reasoning:
            raise ValueError(f"completion: special token {tok!r} inside the {'content' if tok in content else 'reasoning'}")
    return {"role": "assistant", "content": content, "reasoning_content": reasoning, "tool_calls": calls}


parse_message_from_completion_text = parse_completion         # the official name
