"""What a request reserves against its tenant's budget (budget_gate.worst_case): tokens for a
token budget, the dearest pool it may run on for a currency budget; and the price per token the
catalog carries for each pool, from InferencePool.spec.cost and from the static file."""

from __future__ import annotations

from typing import Any

import pytest

from tokenfleet.accounting import cost
from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.api.tenant import Budget
from tokenfleet.gateway import budget_gate, catalog
from tokenfleet.gateway.config import StaticConfig
from tokenfleet.gateway.policy import bodies, quotas
from tokenfleet.gateway.targets import Admitted, Target

CHEAP = cost.Rate(input_per_million=1.0, output_per_million=2.0)
DEAR = cost.Rate(input_per_million=3.0, output_per_million=10.0)
MONEY = Budget.model_validate({"amount": 1.0})
TOKENS = Budget.model_validate({"tokens": 1000})


def _target(rate: cost.Rate | None) -> Target:
    pool = catalog.Pool(key=f"ns/{rate}", classes={}, max_input_tokens=8192, rate=rate)
    return Target(model=catalog.Model(name="m", pools=(pool.key,)), pool=pool, cls="interactive")


def _admitted(
    primary: cost.Rate | None, fallback: cost.Rate | None = None, *, sequences: int = 1
) -> Admitted:
    parsed = bodies.Parsed(
        kind="chat",
        model="m",
        stream=False,
        include_usage=False,
        max_tokens=16,
        max_tokens_given=True,
        prompt_tokens=100,
        sequences=sequences,
        prefix_text="",
        body={},
    )
    tenant = catalog.Tenant(
        key="ns/t", allowed_models=frozenset({"*"}), priority_class="i", limits=quotas.Limits()
    )
    return Admitted(
        tenant=tenant,
        parsed=parsed,
        primary=_target(primary),
        fallback=_target(fallback) if fallback is not None else None,
        due=0.0,
        max_tokens=16,
    )


@pytest.mark.parametrize(
    ("spec", "admitted", "units"),
    [
        pytest.param(TOKENS, _admitted(DEAR), 116, id="tokens-prompt-plus-max-tokens"),
        # issue 35: 4 prompts × n 2 each may generate all 16: 100 + 8 × 16
        pytest.param(TOKENS, _admitted(DEAR, sequences=8), 228, id="tokens-every-sequence"),
        # 100 × 1 + 8 × 16 × 2 = 356 micro-USD
        pytest.param(MONEY, _admitted(CHEAP, sequences=8), 356, id="priced-every-sequence"),
        # 100 × 1 + 16 × 2 = 132 micro-USD
        pytest.param(MONEY, _admitted(CHEAP), 132, id="priced-at-the-model-pool"),
        # fallback dearer: 100 × 3 + 16 × 10 = 460
        pytest.param(MONEY, _admitted(CHEAP, DEAR), 460, id="the-dearer-fallback-is-the-worst"),
        pytest.param(MONEY, _admitted(DEAR, CHEAP), 460, id="a-cheaper-fallback-changes-nothing"),
        pytest.param(MONEY, _admitted(None), 0, id="unpriced-pool-reserves-nothing"),
    ],
)
def test_worst_case(spec: Budget, admitted: Admitted, units: int) -> None:
    assert budget_gate.worst_case(spec, admitted) == units


def test_the_catalog_prices_each_pool_from_its_spec() -> None:
    priced = InferencePoolSpec.model_validate(
        {"cost": {"perGpuHour": 2, "perMillionInputTokens": 0.5, "perMillionOutputTokens": 4}}
    )
    assert catalog.pool_of("ns/a", priced).rate == cost.Rate(
        input_per_million=0.5, output_per_million=4.0
    )
    assert catalog.pool_of("ns/b", InferencePoolSpec()).rate is None


def test_the_static_file_prices_pools_the_same_way() -> None:
    raw: dict[str, Any] = {
        "models": [{"name": "m", "endpoints": ["http://127.0.0.1:1"], "pool": "p"}],
        "pools": [
            {
                "name": "p",
                "cost": {"perGpuHour": 1, "perMillionInputTokens": 1, "perMillionOutputTokens": 2},
            }
        ],
        "tenants": [{"name": "t", "apiKeyHashes": ["sha256:" + "0" * 64], "allowedModels": ["*"]}],
    }
    pool = StaticConfig.model_validate(raw).catalog().pools["p"]
    assert pool.rate == cost.Rate(input_per_million=1.0, output_per_million=2.0)


def test_the_watched_pools_carry_their_price() -> None:
    """A cluster-mode gateway's catalog, built from the watched InferencePools."""
    prices = {"perGpuHour": 2, "perMillionInputTokens": 0.5, "perMillionOutputTokens": 4}
    built = catalog.from_objects(
        pools=[
            {"metadata": {"namespace": "ns", "name": "priced"}, "spec": {"cost": prices}},
            {"metadata": {"namespace": "ns", "name": "plain"}, "spec": {}},
        ],
        models=[],
        tenants=[],
        secrets=[],
        pods=[],
    )
    assert built.pools["ns/priced"].rate == cost.Rate(input_per_million=0.5, output_per_million=4.0)
    assert built.pools["ns/plain"].rate is None
