"""The budget decision (tokenfleet.accounting.budget): under and at the limit for each action,
periods (day, month, December), currency units, the state written to status, and the store
arithmetic."""

from __future__ import annotations

import datetime

import pytest

from tokenfleet.accounting import budget, cost
from tokenfleet.api.tenant import Budget

NOW = datetime.datetime(2026, 12, 1, 11, 0, tzinfo=datetime.UTC)


def _budget(**overrides: object) -> Budget:
    return Budget.model_validate({"tokens": 1000, **overrides})


@pytest.mark.parametrize(
    ("spec", "used", "cost", "serve", "model", "exceeded", "take"),
    [
        pytest.param({}, 0, 1000, True, None, False, True, id="exactly-the-limit-is-served"),
        pytest.param({}, 1, 1000, False, None, True, False, id="reject-past-the-limit"),
        pytest.param(
            {"action": "Downgrade", "downgradeTo": "small"},
            999,
            2,
            True,
            "small",
            True,
            True,
            id="downgrade-serves-the-named-model",
        ),
        pytest.param({"action": "Notify"}, 5000, 1, True, None, True, True, id="notify-serves"),
        pytest.param(
            {"tokens": None, "amount": 1.5},
            1_400_000,
            100_000,
            True,
            None,
            False,
            True,
            id="currency-in-micro-units-under",
        ),
        pytest.param(
            {"tokens": None, "amount": 1.5},
            1_400_001,
            100_000,
            False,
            None,
            True,
            False,
            id="currency-in-micro-units-over",
        ),
    ],
)
def test_decide(
    spec: dict[str, object],
    used: int,
    cost: int,
    serve: bool,
    model: str | None,
    exceeded: bool,
    take: bool,
) -> None:
    verdict = budget.decide(budget=_budget(**spec), used=used, cost=cost, now=NOW)
    assert (verdict.serve, verdict.model, verdict.exceeded, verdict.take) == (
        serve,
        model,
        exceeded,
        take,
    )


def test_reject_says_when_the_budget_resets() -> None:
    verdict = budget.decide(budget=_budget(period="Daily"), used=1000, cost=1, now=NOW)
    assert verdict.retry_after == 13 * 3600
    assert (
        verdict.message == "daily budget of 1000 tokens is spent; it resets at 2026-12-02T00:00:00Z"
    )


@pytest.mark.parametrize(
    ("period", "now", "start", "end", "key"),
    [
        pytest.param("Daily", NOW, "2026-12-01", "2026-12-02", "2026-12-01", id="day"),
        pytest.param("Monthly", NOW, "2026-12-01", "2027-01-01", "2026-12", id="december-wraps"),
        pytest.param(
            "Monthly",
            datetime.datetime(2026, 2, 28, 23, 59, tzinfo=datetime.UTC),
            "2026-02-01",
            "2026-03-01",
            "2026-02",
            id="february",
        ),
    ],
)
def test_periods(period: str, now: datetime.datetime, start: str, end: str, key: str) -> None:
    p = budget.period_of(period, now)  # type: ignore[arg-type]
    assert (p.start.date().isoformat(), p.end.date().isoformat(), p.key) == (start, end, key)


def test_units_and_state() -> None:
    assert budget.units(_budget(), tokens=7, currency=9.0) == 7
    money = _budget(tokens=None, amount=2.0)
    assert budget.units(money, tokens=7, currency=0.0000011) == 2  # rounded up, never free
    assert budget.state(budget=money, used=2_000_000, now=NOW).state == "Exhausted"
    within = budget.state(budget=money, used=500_000, now=NOW)
    assert (within.state, within.used_percent, within.resets_at) == (
        "WithinBudget",
        25,
        "2027-01-01T00:00:00Z",
    )


def test_tally_refuses_only_hard_budgets_and_settles() -> None:
    tally = budget.Tally(used=900)
    assert tally.reserve(cost=200, limit=1000, hard=True) == (False, 900)
    assert tally.reserve(cost=200, limit=1000, hard=False) == (True, 900)
    tally.settle(delta=-150)
    assert tally.used == 950
    tally.settle(delta=-5000)
    assert tally.used == 0


# Currency budgets: a price per million tokens is micro-units per token, so these are exact.
RATE = cost.Rate(input_per_million=2.0, output_per_million=8.0)


@pytest.mark.parametrize(
    ("spec", "prompt", "completion", "rate", "units"),
    [
        pytest.param({}, 100, 16, RATE, 116, id="tokens-count-tokens-whatever-the-price"),
        # 100 × 2 + 16 × 8 = 328 micro-USD
        pytest.param({"tokens": None, "amount": 1.0}, 100, 16, RATE, 328, id="priced-usd"),
        pytest.param({"tokens": None, "amount": 1.0}, 100, 16, None, 0, id="unpriced-pool-free"),
        pytest.param(
            {"tokens": None, "amount": 1.0, "currency": "EUR"},
            100,
            16,
            RATE,
            0,
            id="other-currency-no-exchange-rate",
        ),
        pytest.param(
            {"tokens": None, "amount": 1.0},
            1,
            0,
            cost.Rate(input_per_million=0.1, output_per_million=0.2),
            1,
            id="a-fraction-rounds-up",
        ),
        pytest.param(
            {"tokens": None, "amount": 1.0},
            1,
            1,
            cost.Rate(input_per_million=0.1, output_per_million=0.2),
            1,
            id="float-noise-does-not-round-up",  # 0.1 + 0.2 = 0.30000000000000004
        ),
    ],
)
def test_charge(
    spec: dict[str, object], prompt: int, completion: int, rate: cost.Rate | None, units: int
) -> None:
    got = budget.charge(
        _budget(**spec), prompt_tokens=prompt, completion_tokens=completion, rate=rate
    )
    assert got == units


@pytest.mark.parametrize(
    ("spec", "amount", "text"),
    [
        pytest.param({}, 1200, "1200 tokens", id="tokens"),
        pytest.param({"tokens": None, "amount": 1.0}, 12_400_000, "12.40 USD", id="two-decimals"),
        pytest.param({"tokens": None, "amount": 1.0}, 328, "0.000328 USD", id="micro-exact"),
        pytest.param({"tokens": None, "amount": 1.0}, 0, "0.00 USD", id="zero"),
    ],
)
def test_text(spec: dict[str, object], amount: int, text: str) -> None:
    assert budget.text(_budget(**spec), amount) == text


def test_a_currency_budget_state_shows_limit_spent_and_remaining() -> None:
    money = _budget(tokens=None, amount=0.01, period="Daily")
    within = budget.state(budget=money, used=2_500, now=NOW)
    assert (within.limit, within.spent, within.remaining, within.used_percent) == (
        "0.01 USD",
        "0.0025 USD",
        "0.0075 USD",
        25,
    )
    over = budget.state(budget=money, used=12_000, now=NOW)
    assert (over.state, over.remaining, over.resets_at) == (
        "Exhausted",
        "0.00 USD",
        "2026-12-02T00:00:00Z",
    )
