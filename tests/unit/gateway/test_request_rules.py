"""The business rules of the completion recipe, as tables: when the fallback takes a request
(before trying the model, or after its refusal), the max_tokens a request runs with, the
tokens its quota reserves and settles, how a request that reached an engine ended, and the
body the engine receives."""

from __future__ import annotations

from typing import Any

import pytest

from tokenfleet.gateway.policy import bodies, fallback, usage
from tokenfleet.gateway.policy.rejections import Reason


@pytest.mark.parametrize(
    ("model_ready", "fallback_ready", "why"),
    [
        pytest.param(True, True, None, id="model-ready-it-is-tried"),
        pytest.param(True, False, None, id="model-ready-no-fallback"),
        pytest.param(False, True, "no_endpoints", id="model-cold-fallback-ready"),
        pytest.param(False, False, None, id="nothing-ready-held-for-the-cold-start"),
    ],
)
def test_the_fallback_takes_a_request_at_once_only_for_a_cold_model(
    model_ready: bool, fallback_ready: bool, why: str | None
) -> None:
    assert fallback.first(model_ready=model_ready, fallback_ready=fallback_ready) == why


@pytest.mark.parametrize(
    ("refused", "fallback_ready", "why"),
    [
        *(
            pytest.param(r, True, r.value, id=f"no-room-{r.value}")
            for r in sorted(fallback.NO_ROOM)
        ),
        pytest.param(Reason.QUEUE_FULL, False, None, id="no-room-but-fallback-cold"),
        pytest.param(Reason.DEADLINE_EXCEEDED, True, None, id="deadline-passed-stays"),
        pytest.param(Reason.RATE_LIMITED, True, None, id="the-tenants-limit-stays"),
        pytest.param(Reason.UPSTREAM_ERROR, True, None, id="upstream-failure-stays"),
    ],
)
def test_the_fallback_takes_a_refused_request_only_when_the_model_had_no_room(
    refused: Reason, fallback_ready: bool, why: str | None
) -> None:
    assert fallback.after(refused, fallback_ready=fallback_ready) == why


@pytest.mark.parametrize(
    ("requested", "cap", "expected"),
    [
        pytest.param(256, None, 256, id="no-cap"),
        pytest.param(256, 0, 256, id="zero-is-no-cap"),
        pytest.param(256, 100, 100, id="the-default-is-capped"),
        pytest.param(50, 100, 50, id="below-the-cap"),
    ],
)
def test_max_tokens_stays_within_the_tenants_cap(
    requested: int, cap: int | None, expected: int
) -> None:
    assert usage.max_tokens(requested, cap=cap) == expected


def test_the_reservation_holds_the_prompt_and_every_token_it_may_generate() -> None:
    assert usage.reservation(prompt_tokens=120, max_tokens=256) == 376


@pytest.mark.parametrize(
    ("reported", "events", "expected"),
    [
        pytest.param((30, 12), 99, (30, 12), id="the-engine-reported-usage"),
        pytest.param((None, None), 12, (100, 12), id="counted-as-relayed"),
        pytest.param((None, None), 0, (100, 0), id="nothing-relayed"),
        pytest.param((30, None), 5, (30, 5), id="prompt-reported-only"),
        pytest.param((None, 0), 5, (100, 0), id="zero-completion-reported"),
    ],
)
def test_used_tokens_are_the_engines_report_else_what_was_relayed(
    reported: tuple[int | None, int | None], events: int, expected: tuple[int, int]
) -> None:
    prompt, completion = reported
    got = usage.used(
        prompt_reported=prompt, completion_reported=completion, prompt_estimate=100, relayed=events
    )
    assert got == expected


@pytest.mark.parametrize(
    ("status", "error", "expected"),
    [
        pytest.param(200, None, ("served", ""), id="served"),
        pytest.param(400, None, ("failed", "upstream_400"), id="engine-said-no"),
        pytest.param(200, Reason.UPSTREAM_ERROR, ("failed", "upstream_error"), id="broke-midway"),
        pytest.param(
            200, Reason.DEADLINE_EXCEEDED, ("failed", "deadline_exceeded"), id="deadline-midway"
        ),
    ],
)
def test_how_a_request_that_reached_an_engine_ended(
    status: int, error: Reason | None, expected: tuple[str, str]
) -> None:
    assert usage.ending(status=status, error=error) == expected


def parsed(**body: Any) -> bodies.Parsed:
    got = bodies.parse({"model": "alias", "prompt": "hi", **body}, "completion")
    assert isinstance(got, bodies.Parsed)
    return got


@pytest.mark.parametrize(
    ("body", "max_tokens", "expected"),
    [
        pytest.param(
            {},
            bodies.DEFAULT_MAX_TOKENS,
            {"max_tokens": bodies.DEFAULT_MAX_TOKENS},
            id="the-reserved-default-spelled-out",
        ),
        pytest.param({}, 100, {"max_tokens": 100}, id="capped-default-spelled-out"),
        pytest.param({"max_tokens": 50}, 50, {"max_tokens": 50}, id="the-clients-kept"),
        pytest.param(
            {"max_completion_tokens": 500}, 100, {"max_tokens": 100}, id="degraded-replaces-alias"
        ),
    ],
)
def test_the_engine_gets_the_served_name_the_salt_and_the_max_tokens_set(
    body: dict[str, Any], max_tokens: int, expected: dict[str, Any]
) -> None:
    request = parsed(**body)
    sent = bodies.upstream(request, model="served", salt="s1", max_tokens=max_tokens)
    assert sent == {"model": "served", "prompt": "hi", "cache_salt": "s1", **expected}
    assert request.body["model"] == "alias"  # the parsed request is left as it was
