"""What a request may use and what it used (pure): the max_tokens it runs with, the tokens its
quota reserves, the tokens counted as a stream is relayed, the usage record it is settled with,
and how it ended (metric and log labels).

The reservation is made before the request runs, from the prompt estimate of
:mod:`~tokenfleet.gateway.policy.bodies` (summed over a prompt list) and every token each of its
sequences may generate (max(n, best_of) per prompt), and the engine is always sent that
``max_tokens`` per sequence, so the reservation bounds what it can generate.
It is settled with the engine's own usage report when the request ran to its end (the gateway
asks for one on every stream), else with what was relayed to the client: one token per
relayed event that carries generated text.
"""

from __future__ import annotations

import dataclasses

from tokenfleet.gateway.policy.rejections import Reason


def max_tokens(
    requested: int,
    *,
    cap: int | None,
    context: int | None = None,
    prompt_tokens: int = 0,
    sequences: int = 1,
) -> int:
    """The request's max_tokens per sequence within its share of the tenant's cap (no cap, or
    0: the request's own; the cap bounds all ``sequences`` together) and the model's context
    room (its context window less the prompt estimate; never below 1).

    A request that asked for more than its cap was refused already (bodies.check_limits, also
    one with more sequences than the cap has tokens); this bounds the default a request gets
    when it asks for nothing."""
    share = max(1, cap // max(1, sequences)) if cap else requested
    bounded = min(requested, share)
    if context:
        bounded = min(bounded, max(1, context - prompt_tokens))
    return bounded


def reservation(*, prompt_tokens: int, max_tokens: int, sequences: int = 1) -> int:
    """Tokens the quota holds for a request while it runs: its prompt and all that its
    ``sequences`` (max(n, best_of) for each prompt of a batch: bodies.Parsed) may generate."""
    return prompt_tokens + max_tokens * max(1, sequences)


#: Where generated text sits in a streamed event: chat deltas, completions, reasoning, and the
#: Responses API's text deltas. A mark followed by ``"`` is an empty string.
_TEXT_MARKS = (b'"content":"', b'"text":"', b'"reasoning_content":"', b'"delta":"')
#: Marks whose empty string still stands for a token while its choice is unfinished: vLLM streams
#: a token that completes no character yet (part of a multi-byte character, with a byte-level
#: tokenizer) as an empty text. The role announcement and a simulator's empty closing event
#: carry none.
_EMPTY_TOKEN_MARKS = (b'"content":""', b'"text":""')
_UNFINISHED = b'"finish_reason":null'
#: The token ids vLLM puts in each event when the client asks for them (return_token_ids);
#: ``"prompt_token_ids":[`` does not match (the quote).
_TOKEN_IDS = b'"token_ids":['


def tokens_in(event: bytes) -> int:
    """Generated tokens one relayed SSE event carries.

    With token ids in the event, their count. Otherwise 1 if it carries text or a tool call, or
    an empty text of an unfinished choice (see ``_EMPTY_TOKEN_MARKS``): engines stream one event
    per decoding step and choice. vLLM merges the steps of a stream its API server fell behind
    on, and a speculative-decoding step can carry several tokens; such an event counts as one
    (the engine's final report corrects it when the stream runs to its end)."""
    at = event.find(_TOKEN_IDS)
    if at >= 0:
        ids = event[at + len(_TOKEN_IDS) : event.find(b"]", at)]
        return ids.count(b",") + 1 if ids.strip() else 0
    for mark in _TEXT_MARKS:
        at = event.find(mark)
        if at >= 0 and event[at + len(mark) : at + len(mark) + 1] != b'"':
            return 1
    if b'"tool_calls":[{' in event:
        return 1
    empty = any(mark in event for mark in _EMPTY_TOKEN_MARKS)
    return 1 if empty and _UNFINISHED in event and b'"role":' not in event else 0


def used(
    *,
    prompt_reported: int | None,
    completion_reported: int | None,
    prompt_estimate: int,
    relayed: int,
    ceiling: int | None = None,
) -> tuple[int, int]:
    """(prompt, completion) tokens a request that reached an engine used: the engine's usage
    report, else the prompt estimate and the tokens counted as they were relayed — or, when
    nothing could count them (``ceiling``: a non-streamed answer cut off before it arrived),
    everything the engine was allowed to generate."""
    if completion_reported is not None:
        completion = completion_reported
    else:
        completion = relayed if ceiling is None else max(relayed, ceiling)
    prompt = prompt_reported if prompt_reported is not None else prompt_estimate
    return prompt, completion


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """One request's final usage, the single thing settlement (quota, counters, and any ledger)
    reads. ``reserved`` is what the quota held; ``prompt + completion`` is what is charged."""

    request_id: str
    tenant: str
    model: str
    outcome: str  # served | failed | cancelled | rejected
    pool: str = ""  # the pool that served it (or would have): the usage ledger's key
    reason: str
    prompt: int
    completion: int
    reserved: int

    @property
    def charged(self) -> int:
        return self.prompt + self.completion


def ending(*, status: int, error: Reason | None) -> tuple[str, str]:
    """(outcome, reason) of a request that reached an engine: served, or failed and why."""
    if error is not None:
        return "failed", error.value
    if status >= 400:
        return "failed", f"upstream_{status}"
    return "served", ""
