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
#: The longest ``model`` a body may name, in characters. Served names are Kubernetes names
#: (≤ 253) or Hugging Face ids (well under 100); the name is written to the access log and to
#: error messages, so a longer one is refused before it is looked up (issue 35).
MAX_MODEL_CHARS = 256
#: The most prompts one /v1/completions batch may carry (OpenAI's limit on a list of inputs). With
#: the ranges below it keeps a reservation (prompts × n × max_tokens) and its price well inside
#: 64 bits, which Redis counts in and the access log writes.
MAX_PROMPTS = 2048


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Bound:
    """A numeric body field's type and closed range."""

    integer: bool  # whole numbers only (a JSON 2.0 is not one)
    low: int | float
    high: int | float

    def holds(self, value: Any) -> bool:
        """Whether ``value`` (decoded JSON) is such a number; a boolean never is."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.integer and not isinstance(value, int):
            return False
        return self.low <= value <= self.high

    def describe(self) -> str:
        return f"{'an integer' if self.integer else 'a number'} from {self.low} to {self.high}"


#: Token counts fit engines' 32-bit integers; the model's context bounds them further later.
TOKEN_LIMIT = Bound(integer=True, low=1, high=2**31 - 1)
#: Every numeric field the gateway reads besides the token limit, with OpenAI's ranges (a seed
#: is vLLM's 64-bit one). Out of range is a 400 here rather than an engine's, or an overflow
#: further on: a reservation of n × max_tokens beyond 64 bits once ended in a 500 (issue 35).
NUMBERS: Mapping[str, Bound] = {
    "n": Bound(integer=True, low=1, high=128),
    "best_of": Bound(integer=True, low=1, high=128),
    "seed": Bound(integer=True, low=-(2**63), high=2**63 - 1),
    "temperature": Bound(integer=False, low=0, high=2),
    "top_p": Bound(integer=False, low=0, high=1),
    "presence_penalty": Bound(integer=False, low=-2, high=2),
    "frequency_penalty": Bound(integer=False, low=-2, high=2),
    # OpenAI's limit and vLLM's default --max-logprobs: a larger count made the engine build
    # that many alternatives per token (2^31 hung the simulator; issue 35's fuzz table)
    "top_logprobs": Bound(integer=True, low=0, high=20),
}
#: /v1/completions' ``logprobs`` is a count (chat's is a boolean, checked apart).
COMPLETION_NUMBERS: Mapping[str, Bound] = {"logprobs": Bound(integer=True, low=0, high=20)}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Parsed:
    """A valid request, with what admission and quotas need to know."""

    kind: Kind
    model: str
    stream: bool
    include_usage: bool
    max_tokens: int  # per sequence
    max_tokens_given: bool
    prompt_tokens: int  # an estimate, summed over a prompt list
    sequences: int
    """What the engine generates, each up to ``max_tokens``: max(n, best_of) per prompt of a
    completions prompt list (a batch; vLLM runs best_of candidates and returns n of them)."""
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


def _prompts(body: Mapping[str, Any], kind: Kind) -> int:
    """Prompts in the request: a completions list of strings is a batch (token ids are one)."""
    prompt = body.get("prompt")
    if kind == "completion" and isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        return len(prompt)
    return 1


def _numbers(
    body: Mapping[str, Any], limits: tuple[str, ...], kind: Kind
) -> dict[str, Any] | Rejected:
    """The numeric fields the body sets (null is unset), each checked: ``limits`` are the
    kind's token limits, the rest :data:`NUMBERS` (and :data:`COMPLETION_NUMBERS`)."""
    bounds = {**dict.fromkeys(limits, TOKEN_LIMIT), **NUMBERS}
    if kind == "completion":
        bounds.update(COMPLETION_NUMBERS)
    elif kind == "chat" and body.get("logprobs") not in (None, True, False):
        return _bad("'logprobs' must be a boolean", "logprobs")
    found = {}
    for name, bound in bounds.items():
        value = body.get(name)
        if value is None:
            continue
        if not bound.holds(value):
            return _bad(f"'{name}' must be {bound.describe()}", name)
        found[name] = value
    return found


def parse(body: Any, kind: Kind) -> Parsed | Rejected:
    """Check a decoded JSON body of /v1/chat/completions (``chat``) or /v1/completions."""
    if not isinstance(body, dict):
        return _bad("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return _bad("'model' is required and must be a string", "model")
    if len(model) > MAX_MODEL_CHARS:
        return _bad(f"'model' is longer than {MAX_MODEL_CHARS} characters: no model", "model")
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
    numbers = _numbers(body, names, kind)
    if isinstance(numbers, Rejected):
        return numbers
    given = [numbers[name] for name in names if name in numbers]
    prompts = _prompts(body, kind)
    if prompts > MAX_PROMPTS:
        return _bad(f"'prompt' may hold at most {MAX_PROMPTS} prompts", "prompt")
    return Parsed(
        kind=kind,
        model=model,
        stream=stream,
        include_usage=include_usage,
        max_tokens=0 if kind == "embedding" else min(given) if given else DEFAULT_MAX_TOKENS,
        max_tokens_given=bool(given),
        prompt_tokens=work[0],
        sequences=prompts * max(numbers.get("n", 1), numbers.get("best_of", 1)),
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
    if max_tokens_cap is not None:
        return _over_cap(parsed, max_tokens_cap)
    return None


def _over_cap(parsed: Parsed, cap: int) -> Rejected | None:
    """The tenant's cap bounds what the whole request may generate: every sequence of every
    prompt (a request asking for no max_tokens gets its share of the cap: usage.max_tokens)."""
    sequences, asked = parsed.sequences, parsed.max_tokens
    if sequences == 1 and parsed.max_tokens_given and asked > cap:
        message = f"max_tokens is {asked}; your limit is {cap}"
    elif parsed.max_tokens_given and asked * sequences > cap:
        message = (
            f"max_tokens {asked} × {sequences} sequences (prompts × n or best_of) is "
            f"{asked * sequences}; your limit is {cap} in all"
        )
    elif sequences > cap:
        message = (
            f"{sequences} sequences (prompts × n or best_of) of one token each are more than "
            f"your limit of {cap} tokens"
        )
    else:
        return None
    return Rejected(reason=Reason.MAX_TOKENS_TOO_LARGE, message=message, param="max_tokens")


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
