"""One namespace's slow artifact server must not hold back another's verdicts, and the
operator's verification fetches are bounded (issue #35 finding 6).

Matrix: two namespaces, one whose check blocks × the verdict of the other arriving meanwhile;
and the limits the verifier hands to its fetch (bytes, whole-fetch seconds, allowed networks,
file roots) from the operator's settings.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from tokenfleet.api.adapter import ModelAdapterSpec
from tokenfleet.api.deployment import TrustPolicy
from tokenfleet.operator import adapter_verifier
from tokenfleet.operator.config import AdapterFetchLimits
from tokenfleet.operator.plan.adapter_status import Verdict

TRUST = TrustPolicy.model_validate({"sigstore": {"identity": "a@b", "issuer": "https://i"}})


def spec(name: str) -> ModelAdapterSpec:
    return ModelAdapterSpec.model_validate(
        {
            "base": "m",
            "servedName": name,
            "tenants": ["t"],
            "artifact": {"uri": f"https://example.com/{name}", "digest": "sha256:" + "a" * 64},
        }
    )


async def test_a_slow_namespace_does_not_hold_back_another() -> None:
    release = threading.Event()
    verifier = adapter_verifier.AdapterVerifier(kube=None, wake=lambda: None)  # type: ignore[arg-type]

    def blocking(namespace: str, spec: ModelAdapterSpec, trust: TrustPolicy) -> Verdict:
        if namespace == "slow":
            release.wait(10)
        return Verdict(digest=spec.artifact.digest, reason="Verified")

    verifier._verify_blocking = blocking  # type: ignore[method-assign]
    try:
        assert verifier.verdict(uid="s", namespace="slow", spec=spec("s"), trust=TRUST) is None
        await asyncio.sleep(0.05)
        assert verifier.verdict(uid="f", namespace="fast", spec=spec("f"), trust=TRUST) is None
        for _ in range(100):
            await asyncio.sleep(0.02)
            got = verifier.verdict(uid="f", namespace="fast", spec=spec("f"), trust=TRUST)
            if got is not None:
                break
        assert got is not None and got.reason == "Verified"  # while "slow" still blocks
    finally:
        release.set()
        await asyncio.sleep(0.1)


def test_the_fetch_is_bounded_by_the_operator_settings(monkeypatch: Any, tmp_path: Path) -> None:
    from tokenfleet.signing import verify

    seen: dict[str, Any] = {}

    def fake(uri: str, **kwargs: Any) -> tuple[Any, None]:
        seen.update(kwargs)
        return verify.Verdict(reason=verify.Reason.ARTIFACT_UNREACHABLE, message="x"), None

    monkeypatch.setattr(verify, "verify_artifact", fake)
    settings = AdapterFetchLimits(
        max_bytes=123, total_seconds=4.5, allowed_networks=("10.250.0.1/32",), file_roots=("/e",)
    )
    verifier = adapter_verifier.AdapterVerifier(kube=None, wake=lambda: None, limits=settings)  # type: ignore[arg-type]
    verifier._verify_blocking("ns", spec("a"), TRUST)
    bounds = seen["limits"]
    assert (bounds.max_bytes, bounds.seconds) == (123, 4.5)
    assert bounds.allowed_networks == ("10.250.0.1/32",) and bounds.file_roots == ("/e",)
