"""An adapter's files on the worker: fetched once per digest, verified on every load.

A ``file://`` adapter (already on the shared ``/models`` volume) is verified where it lies. A
remote one (http(s)://, s3://) is downloaded into a fresh directory below the adapter directory,
verified there, and only then renamed to its digest's directory (adapter_plan.cache_dir), so a
reload after an eviction reads it from disk and nothing unverified is ever at that path. Cached
files are verified again on every load: they may have changed on the volume since the last
one. A copy that fails verification is deleted, so the next load downloads it afresh instead of
refusing forever.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import threading
from pathlib import Path

from tokenfleet.signing import fetch, verify
from tokenfleet.signing.verdict import Reason, Verdict
from tokenfleet.worker import adapter_plan

#: Marks a digest's directory as completely downloaded (written last).
COMPLETE = ".complete"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Checked:
    """A load's verdict, the directory the engine may read (when verified) and whether the
    files were downloaded for it (False: already on disk)."""

    verdict: Verdict
    path: Path | None
    downloaded: bool


class AdapterFiles:
    """Fetch-and-verify with one download at a time per digest (two names may share one)."""

    def __init__(self, *, directory: Path, trust: verify.Trust, timeout: float) -> None:
        self._directory = directory
        self._trust = trust
        self._timeout = timeout
        self._guard = threading.Lock()
        self._digest_locks: dict[str, threading.Lock] = {}

    def check(self, request: adapter_plan.LoadRequest) -> Checked:
        """The verdict on the request's files, fetched first unless on disk already."""
        if request.uri.startswith("file://"):
            verdict, path = verify.verify_artifact(
                request.uri,
                trust=self._trust,
                expected_digest=request.digest,
                signature_uri=request.signature_uri,
            )
            return Checked(verdict=verdict, path=path, downloaded=False)
        with self._guard:
            lock = self._digest_locks.setdefault(request.digest, threading.Lock())
        with lock:
            return self._check_remote(request)

    def _check_remote(self, request: adapter_plan.LoadRequest) -> Checked:
        cached = adapter_plan.cache_dir(self._directory, request.digest)
        if (cached / COMPLETE).is_file():  # verified when it arrived; verified again now
            verdict = self._verify(cached, request)
            if not verdict.verified:
                shutil.rmtree(cached, ignore_errors=True)
            return Checked(verdict=verdict, path=self._served(cached, verdict), downloaded=False)
        self._directory.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".partial-", dir=self._directory))
        try:
            try:
                self._download(request, staging)
            except fetch.Unreachable as error:
                verdict = Verdict(reason=Reason.ARTIFACT_UNREACHABLE, message=str(error))
                return Checked(verdict=verdict, path=None, downloaded=True)
            # Verified where it landed, before anything is at the digest's path: a refused
            # download never sits where a later load (or a restart) would look for it.
            verdict = self._verify(staging, request)
            if not verdict.verified:
                return Checked(verdict=verdict, path=None, downloaded=True)
            (staging / COMPLETE).touch()
            shutil.rmtree(cached, ignore_errors=True)  # an incomplete earlier attempt
            staging.rename(cached)
            return Checked(verdict=verdict, path=self._served(cached, verdict), downloaded=True)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _verify(self, directory: Path, request: adapter_plan.LoadRequest) -> Verdict:
        return verify.verify(
            directory / "model",
            signature=directory / fetch.SIGNATURE_FILE,
            trust=self._trust,
            expected_digest=request.digest,
        )

    @staticmethod
    def _served(cached: Path, verdict: Verdict) -> Path | None:
        return cached / "model" if verdict.verified else None

    def _download(self, request: adapter_plan.LoadRequest, staging: Path) -> None:
        fetch.fetch(
            request.uri,
            signature_uri=request.signature_uri,
            workdir=staging,
            timeout=self._timeout,
        )
