"""OpenAI request bodies checked and turned into token work (pure, and cheap: it runs per request).

A hand-written check rather than a pydantic model: it touches only the fields the gateway needs,
passes every other field through untouched (clients send many), and costs microseconds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from tokenfleet.gateway.policy.rejections import Reason, Rejected

Kind = Literal["chat", "completion", "embedding", "response"]
#: Each kind's engine route.
PATHS: dict[str, str] = {
    "chat": "/v1/chat/completions",
    "completion": "/v1/completions",
    "embedding": "/v1/embeddings",
    "response": "/v1/responses",
}
ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
#: Characters per token for the admission estimate; real tokenizers give 3.5-4.5 for English.
#: Erring low overestimates tokens, so reservations err on the safe side.
CHARS_PER_TOKEN = 4
#: Per-message overhead of chat templates (role markers, separators), in tokens.
MESSAGE_OVERHEAD_TOKENS = 4
DEFAULT_MAX_TOKENS = 256


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Parsed:
    """A valid request, with what admission and quotas need to know."""

    kind: Kind
    model: str
    stream: bool
    include_usage: bool
    max_tokens: int
    max_tokens_given: bool
    prompt_tokens: int  # an estimate
    choices: int  # n: every choice may generate max_tokens
    prefix_text: str  # the prompt's opening, for prefix affinity
    body: dict[str, Any]


def _bad(message: str, param: str | None = None) -> Rejected:
    return Rejected(reason=Reason.INVALID_REQUEST, message=message, param=param)


def _text_of(content: Any) -> str | None:
    """A message's text: a string, or the text parts of a content array; None if malformed."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
                return None
            text = part.get("text")
            if isinstance(text, str):
                parts.append(text)
        return "".join(parts)
    return "" if content is None else None


def _messages(messages: Any) -> tuple[int, str] | Rejected:
    if not isinstance(messages, list) or not messages:
        return _bad("'messages' must be a non-empty array of messages", "messages")
    chars, pieces = 0, []
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, Mapping) else None
        if not isinstance(role, str) or role not in ROLES:  # a list would not even hash
            return _bad(
                f"messages[{i}] needs a 'role' of {', '.join(sorted(ROLES))}", f"messages[{i}].role"
            )
        text = _text_of(message.get("content"))
        if text is None:
            return _bad(
                f"messages[{i}].content must be a string or an array of parts",
                f"messages[{i}].content",
            )
        chars += len(text)
        pieces.append(text)
    prefix = "\x1e".join(pieces)[:8192]
    return chars // CHARS_PER_TOKEN + MESSAGE_OVERHEAD_TOKENS * len(messages), prefix


def _prompt(prompt: Any) -> tuple[int, str] | Rejected:
    if isinstance(prompt, str) and prompt:
        return len(prompt) // CHARS_PER_TOKEN + 1, prompt[:8192]
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        joined = "".join(prompt)
        return len(joined) // CHARS_PER_TOKEN + len(prompt), prompt[0][:8192]
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(p, int) and not isinstance(p, bool) for p in prompt)
    ):
        return len(prompt), ",".join(map(str, prompt[:2048]))
    return _bad(
        "'prompt' must be a non-empty string, array of strings or array of token ids", "prompt"
    )


def _input(body: Mapping[str, Any], kind: Kind) -> tuple[int, str] | Rejected:
    """The prompt of an embeddings or Responses request: ``input`` (and ``instructions``)."""
    value = body.get("input")
    if kind == "response" and isinstance(value, list):
        messages = _messages(
            [{"role": "user", **m} if isinstance(m, Mapping) else m for m in value]
        )
        if isinstance(messages, Rejected):
            return _bad("'input' must be a string or an array of input items", "input")
        work: tuple[int, str] = messages
    elif kind == "embedding" and isinstance(value, list) and value and isinstance(value[0], list):
        if not all(isinstance(v, list) and v for v in value):
            return _bad("'input' must be a string, strings, token ids or arrays of them", "input")
        work = sum(len(v) for v in value), ""
    else:
        prompt = _prompt(value)
        if isinstance(prompt, Rejected):
            return _bad("'input' must be a non-empty string, strings or token ids", "input")
        work = prompt
    instructions = body.get("instructions")
    if kind == "response" and isinstance(instructions, str):
        return work[0] + len(instructions) // CHARS_PER_TOKEN, instructions[:8192] + work[1]
    return work


def _work(body: Mapping[str, Any], kind: Kind) -> tuple[int, str] | Rejected:
    if kind == "chat":
        return _messages(body.get("messages"))
    if kind == "completion":
        return _prompt(body.get("prompt"))
    return _input(body, kind)


def _positive_int(body: Mapping[str, Any], name: str) -> int | Rejected | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        return _bad(f"'{name}' must be a positive integer", name)
    return value


def parse(body: Any, kind: Kind) -> Parsed | Rejected:
    """Check a decoded JSON body of /v1/chat/completions (``chat``) or /v1/completions."""
    if not isinstance(body, dict):
        return _bad("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return _bad("'model' is required and must be a string", "model")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        return _bad("'stream' must be a boolean", "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, Mapping):
        return _bad("'stream_options' must be an object", "stream_options")
    include_usage = bool(options and options.get("include_usage") is True)
    work = _work(body, kind)
    if isinstance(work, Rejected):
        return work
    names = (
        ("max_output_tokens",) if kind == "response" else ("max_tokens", "max_completion_tokens")
    )
    limits = [_positive_int(body, name) for name in (*names, "n")]
    for limit in limits:
        if isinstance(limit, Rejected):
            return limit
    given = [x for x in limits[:-1] if isinstance(x, int)]
    choices = limits[-1] if isinstance(limits[-1], int) else 1
    for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
        value = body.get(name)
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)):
            return _bad(f"'{name}' must be a number", name)
    return Parsed(
        kind=kind,
        model=model,
        stream=stream,
        include_usage=include_usage,
        max_tokens=0 if kind == "embedding" else min(given) if given else DEFAULT_MAX_TOKENS,
        max_tokens_given=bool(given),
        prompt_tokens=work[0],
        choices=choices,
        prefix_text=work[1],
        body=body,
    )


def check_limits(
    parsed: Parsed, *, max_input_tokens: int, max_tokens_cap: int | None
) -> Rejected | None:
    """The pool's context bucket and the tenant's max_tokens cap."""
    if parsed.prompt_tokens > max_input_tokens:
        return Rejected(
            reason=Reason.CONTEXT_TOO_LONG,
            message=f"the prompt is about {parsed.prompt_tokens} tokens; this model takes at most "
            f"{max_input_tokens} input tokens",
            param="messages" if parsed.kind == "chat" else "prompt",
        )
    if (
        max_tokens_cap is not None
        and parsed.max_tokens_given
        and parsed.max_tokens > max_tokens_cap
    ):
        return Rejected(
            reason=Reason.MAX_TOKENS_TOO_LARGE,
            message=f"max_tokens is {parsed.max_tokens}; your limit is {max_tokens_cap}",
            param="max_tokens",
        )
    return None


def upstream(parsed: Parsed, *, model: str, salt: str, max_tokens: int) -> dict[str, Any]:
    """The body sent to the engine: the client's, with the served name (aliases are the
    gateway's business, not the engine's), the tenant's cache salt, ``max_tokens`` always
    spelled out as the gateway reserved it (so the reservation bounds what the engine may
    generate, whatever its own default), and a usage report asked for on every stream (the
    gateway settles with the engine's count; proxy strips it for a client that did not ask)."""
    body = dict(parsed.body)
    body["model"] = model
    if parsed.kind == "embedding":
        return body  # no prefix cache to salt, nothing generated
    body["cache_salt"] = salt
    if parsed.kind == "response":
        body["max_output_tokens"] = max_tokens
    else:
        body["max_tokens"] = max_tokens
        body.pop("max_completion_tokens", None)
        if parsed.stream and not parsed.include_usage:
            asked = parsed.body.get("stream_options") or {}
            body["stream_options"] = {**asked, "include_usage": True}
    return body
