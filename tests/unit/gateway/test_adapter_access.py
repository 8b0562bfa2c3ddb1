"""Adapter offers and access (``policy.adapter_access``): which verdicts offer an adapter, and
what a request for one is answered.

Matrix: the verdict (none, verified, refused) × its currency (generation, digest); the tenant
(named, not named, another namespace's) × the offer (offered, pending, refused).
"""

from __future__ import annotations

import dataclasses

import pytest

from tokenfleet.gateway.policy.adapter_access import (
    PENDING_RETRY_SECONDS,
    Offer,
    Request,
    Verdict,
    authorize,
    offer,
)
from tokenfleet.gateway.policy.rejections import Reason

DIGEST = "sha256:" + "a" * 64


def verdict(**overrides: object) -> Verdict:
    base = Verdict(
        generation=3,
        observed_generation=3,
        spec_digest=DIGEST,
        status_digest=DIGEST,
        verified=True,
        reason="Verified",
    )
    return dataclasses.replace(base, **overrides)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("v", "expected"),
    [
        pytest.param(verdict(), Offer.OFFERED, id="verified, current: offered"),
        pytest.param(
            verdict(observed_generation=None, status_digest="", verified=False, reason=""),
            Offer.PENDING,
            id="no status yet: pending",
        ),
        pytest.param(verdict(observed_generation=2), Offer.PENDING, id="older generation"),
        pytest.param(
            verdict(status_digest="sha256:" + "b" * 64), Offer.PENDING, id="another digest"
        ),
        pytest.param(
            verdict(verified=False, reason="SignatureInvalid"), Offer.REFUSED, id="refused"
        ),
        pytest.param(
            verdict(verified=False, reason="SignatureInvalid", observed_generation=2),
            Offer.PENDING,
            id="an old refusal: pending again",
        ),
        pytest.param(verdict(verified=False, reason=""), Offer.PENDING, id="no reason yet"),
        pytest.param(verdict(generation=None), Offer.PENDING, id="no generation"),
    ],
)
def test_offer(v: Verdict, expected: Offer) -> None:
    assert offer(v) is expected


def request(**overrides: object) -> Request:
    base = Request(
        name="acme-support",
        resource="acme-support",
        namespace="team-a",
        tenants=frozenset({"acme"}),
        offer=Offer.OFFERED,
        reason="",
        tenant_namespace="team-a",
        tenant_name="acme",
    )
    return dataclasses.replace(base, **overrides)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("r", "reason", "status", "retry"),
    [
        pytest.param(request(), None, None, None, id="named tenant, offered: served"),
        pytest.param(
            request(tenant_name="other"), Reason.MODEL_NOT_ALLOWED, 403, None, id="not named"
        ),
        pytest.param(
            request(tenant_namespace="team-b"),
            Reason.MODEL_NOT_ALLOWED,
            403,
            None,
            id="same name, another namespace",
        ),
        pytest.param(
            request(tenant_name="other", offer=Offer.REFUSED, reason="DigestMismatch"),
            Reason.MODEL_NOT_ALLOWED,
            403,
            None,
            id="not named learns nothing of the verdict",
        ),
        pytest.param(
            request(offer=Offer.PENDING),
            Reason.ADAPTER_PENDING,
            503,
            PENDING_RETRY_SECONDS,
            id="pending: 503 with Retry-After",
        ),
        pytest.param(
            request(offer=Offer.REFUSED, reason="UntrustedSigner"),
            Reason.ADAPTER_REFUSED,
            503,
            None,
            id="refused: 503 without Retry-After",
        ),
    ],
)
def test_authorize(
    r: Request, reason: Reason | None, status: int | None, retry: float | None
) -> None:
    refused = authorize(r)
    if reason is None:
        assert refused is None
        return
    assert refused is not None
    assert (refused.reason, refused.status, refused.retry_after) == (reason, status, retry)
    assert refused.param == "model" and "acme-support" in refused.message


def test_a_refusal_names_the_verdict_and_where_to_read_it() -> None:
    refused = authorize(request(offer=Offer.REFUSED, reason="UntrustedSigner"))
    assert refused is not None
    assert "UntrustedSigner" in refused.message
    assert "kubectl describe modeladapter acme-support -n team-a" in refused.message
    assert refused.body()["error"] == {
        "message": refused.message,
        "type": "service_unavailable",
        "param": "model",
        "code": "adapter_refused",
    }
