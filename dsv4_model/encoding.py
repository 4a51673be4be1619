"""Chat encoding per DSV4's encoding_dsv4.py (spec section 9): chat and thinking modes, drop-thinking of earlier
turns, reasoning_effort. Layout: BOS + system + (<｜User｜>user <｜Assistant｜> X [reasoning</think>]content EOS)*."""
from __future__ import annotations

from .tokenizer import BOS, EOS

USER, ASSISTANT, THINK, END_THINK = "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>"
# The spec records only the opening of the "max" paragraph; this is our rendering of it.
MAX_EFFORT = "Reasoning Effort: Absolute maximum. Think as long and as carefully as the problem needs before answering.\n\n"


def encode_messages(messages: list[dict], thinking_mode: str = "chat", drop_thinking: bool = True,
                    add_default_bos_token: bool = True, reasoning_effort: str | None = None) -> str:
    if thinking_mode not in ("chat", "thinking"):
        raise ValueError(f"thinking_mode must be 'chat' or 'thinking', found {thinking_mode!r}")
    if reasoning_effort not in (None, "high", "max"):
        raise ValueError(f"reasoning_effort must be None, 'high' or 'max', found {reasoning_effort!r}")
    thinking = thinking_mode == "thinking"
    if any(m.get("tools") for m in messages):
        drop_thinking = False                       # tool use keeps every turn's reasoning
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    last_user = users[-1] if users else -1
    out = [BOS] if add_default_bos_token else []
    if thinking and reasoning_effort == "max":
        out.append(MAX_EFFORT)
    for i, m in enumerate(messages):
        role, content = m.get("role"), m.get("content") or ""
        if role in ("system", "developer"):
            out.append(content)
        elif role == "user":
            keep = thinking and (not drop_thinking or i == last_user)
            out.append(USER + content + ASSISTANT + (THINK if keep else END_THINK))
        elif role == "assistant":
            keep = thinking and (not drop_thinking or i > last_user)
            reasoning = m.get("reasoning_content") or ""
            out.append((reasoning + END_THINK if keep else "") + content + EOS)
        else:
            raise ValueError(f"message {i}: unknown role {role!r} (expected system, developer, user or assistant)")
    return "".join(out)
