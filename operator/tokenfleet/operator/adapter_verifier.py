"""The operator's check of ModelAdapter artifacts: tokenfleet.signing, off the reconcile loop.

Each (adapter, digest, trust) is verified once, in a background thread, and the loop is woken
when a verdict arrives; status shows it from then on. A refusal is tried again after
``RETRY_REFUSED_SECONDS``, a verified adapter after ``RECHECK_VERIFIED_SECONDS``. This verdict
is what the gateways require before they ask a worker to load the adapter; the worker's sidecar
verifies again before its engine sees the files, so what serves is always what was checked
there (docs/adapters.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tokenfleet.api.adapter import ModelAdapterSpec
from tokenfleet.api.deployment import TrustPolicy
from tokenfleet.operator.config import AdapterFetchLimits
from tokenfleet.operator.k8s import Kube
from tokenfleet.operator.plan.adapter_status import Verdict

if TYPE_CHECKING:
    from tokenfleet.signing import fetch
    from tokenfleet.signing.verify import Trust

log = logging.getLogger("tokenfleet.operator.adapters")

#: A refusal is checked again this long after it: the files, or the trust Secret, may be put
#: right without any change to the spec.
RETRY_REFUSED_SECONDS = 60.0
#: A verified adapter is checked again this long after: files changed in place are caught here
#: too, not only by the worker's sidecar at its next load.
RECHECK_VERIFIED_SECONDS = 600.0
#: Longest one receive may stall; the whole fetch is bounded by config.AdapterFetchLimits.
READ_TIMEOUT_SECONDS = 10.0


@dataclasses.dataclass(frozen=True, slots=True)
class _Key:
    uid: str
    digest: str
    uri: str
    signature_uri: str
    trust: str  # the trust policy, as JSON


class AdapterVerifier:
    """Verdicts by adapter uid; :meth:`verdict` starts a check when none is current."""

    def __init__(
        self,
        kube: Kube,
        wake: Callable[[], None],
        limits: AdapterFetchLimits | None = None,
    ) -> None:
        self._kube = kube
        self._wake = wake
        self._limits = limits or AdapterFetchLimits()
        self._done: dict[_Key, tuple[Verdict, float]] = {}
        self._running: dict[_Key, asyncio.Task[None]] = {}
        # One slow server holds back only its own namespace's verdicts; the overall bound keeps
        # the scratch volume (at_once x max_bytes) and the CPU (hashing) within the pod's share.
        self._at_once = asyncio.Semaphore(self._limits.at_once)
        self._namespaces: dict[str, asyncio.Semaphore] = {}

    def verdict(
        self, *, uid: str, namespace: str, spec: ModelAdapterSpec, trust: TrustPolicy
    ) -> Verdict | None:
        """The verdict for this spec and trust, or None while it is being checked."""
        artifact = spec.artifact
        key = _Key(
            uid, artifact.digest, artifact.uri, artifact.signature_uri, trust.model_dump_json()
        )
        done = self._done.get(key)
        if done is not None:
            verdict, at = done
            age = time.monotonic() - at
            verified = verdict.reason == "Verified"
            stale = age > (RECHECK_VERIFIED_SECONDS if verified else RETRY_REFUSED_SECONDS)
            if not stale:
                return verdict
        if key not in self._running:
            self._running[key] = asyncio.create_task(self._check(key, namespace, spec, trust))
        return done[0] if done is not None else None

    def forget(self, live: set[str]) -> None:
        """Drop verdicts of adapters that no longer exist, and of older digests."""
        for key in [k for k in self._done if k.uid not in live]:
            del self._done[key]

    async def _check(
        self, key: _Key, namespace: str, spec: ModelAdapterSpec, trust: TrustPolicy
    ) -> None:
        own = self._namespaces.setdefault(namespace, asyncio.Semaphore(self._limits.per_namespace))
        try:
            async with own, self._at_once:
                started = time.monotonic()
                verdict = await asyncio.to_thread(self._verify_blocking, namespace, spec, trust)
                log.info(
                    "adapter %s/%s %s: %s in %.2f s",
                    namespace,
                    spec.served_name,
                    spec.artifact.digest[:19],
                    verdict.reason,
                    time.monotonic() - started,
                )
            for old in [k for k in self._done if k.uid == key.uid]:
                del self._done[old]
            self._done[key] = (verdict, time.monotonic())
            self._wake()
        except Exception:  # a broken check is retried on the next pass, never fatal
            log.exception("verifying adapter %s/%s failed", namespace, spec.served_name)
        finally:
            self._running.pop(key, None)

    def _verify_blocking(
        self, namespace: str, spec: ModelAdapterSpec, trust: TrustPolicy
    ) -> Verdict:
        from tokenfleet.signing import verify  # sigstore's import is slow: on first use only

        artifact = spec.artifact
        with tempfile.TemporaryDirectory(prefix="tokenfleet-adapter-") as workdir:
            try:
                signer = self._trust(namespace, trust, Path(workdir))
            except LookupError as missing:
                return Verdict(
                    digest=artifact.digest, reason="UntrustedSigner", message=str(missing)
                )
            found, _ = verify.verify_artifact(
                artifact.uri,
                trust=signer,
                expected_digest=artifact.digest,
                signature_uri=artifact.signature_uri,
                workdir=Path(workdir) / "files",
                timeout=READ_TIMEOUT_SECONDS,
                limits=self._fetch_limits(),
            )
        return Verdict(
            digest=artifact.digest,
            reason=found.reason.value,
            message=found.message,
            signer=found.signer,
        )

    def _fetch_limits(self) -> fetch.Limits:
        from tokenfleet.signing import fetch

        limits = self._limits
        return fetch.Limits(
            max_bytes=limits.max_bytes,
            seconds=limits.total_seconds,
            allowed_networks=limits.allowed_networks,
            file_roots=limits.file_roots,
        )

    def _trust(self, namespace: str, trust: TrustPolicy, workdir: Path) -> Trust:
        from tokenfleet.signing import verify

        if trust.sigstore is not None:
            return verify.Trust(identity=trust.sigstore.identity, issuer=trust.sigstore.issuer)
        assert trust.public_key is not None  # the CRD requires exactly one method
        ref = trust.public_key
        pem = self._kube.trust_key(namespace, ref.name, ref.key)
        if pem is None:
            raise LookupError(f"trust Secret {ref.name!r} has no key {ref.key!r}")
        path = workdir / "trust.pem"
        path.write_bytes(pem)
        return verify.Trust(public_key=path)
