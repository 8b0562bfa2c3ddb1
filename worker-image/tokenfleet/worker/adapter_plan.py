"""The adapter-loader's decisions (pure): its settings, its requests, and what a load does.

The sidecar (tokenfleet.worker.adapters) parses a request here, fetches and verifies the
adapter, then asks :func:`decide` what to tell the engine, given what it loaded before and what
the engine lists now::

    verdict refused ──▶ same digest loaded?  yes ─▶ UNLOADED_REFUSED (the files changed under
                     │                               the engine: it must not keep serving them)
                     └────────────────────── no  ─▶ REFUSED (the engine never hears of it)
    verdict verified ─▶ same digest loaded and the engine lists it ─▶ ALREADY_LOADED (untouched)
                     ├─ the engine lists the name (other digest, or a load before a restart)
                     │                                              ─▶ REPLACED (unload, load)
                     └─ otherwise                                   ─▶ LOADED (load)

Every answer's HTTP status comes from one table, :data:`STATUS`.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import re
from collections.abc import Mapping
from pathlib import Path

from tokenfleet.signing.verdict import Verdict

DEFAULT_PORT = 8002
#: A pod's sidecar answers the gateway on the pod IP: the NetworkPolicy admits only the gateway,
#: and every /v1 call needs the engine key (Settings.api_key).
DEFAULT_ADDRESS = "0.0.0.0"  # noqa: S104
DEFAULT_ENGINE_URL = "http://127.0.0.1:8000"
DEFAULT_ADAPTER_DIR = "/models/adapters"
#: Seconds one download connection or read may stall (the worker entrypoint's default).
DEFAULT_FETCH_TIMEOUT = 30.0
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class BadRequest(ValueError):
    """A request body the sidecar cannot act on (HTTP 400)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """The sidecar's environment, parsed once at start.

    The trust is the sidecar's own mount (exactly one of a public key or a Sigstore identity and
    issuer): a load request names only the files, never whom to trust.
    """

    port: int = DEFAULT_PORT
    address: str = DEFAULT_ADDRESS
    engine_url: str = DEFAULT_ENGINE_URL
    adapter_dir: Path = Path(DEFAULT_ADAPTER_DIR)
    public_key: Path | None = None
    identity: str = ""
    issuer: str = ""
    fetch_timeout: float = DEFAULT_FETCH_TIMEOUT
    api_key: str = dataclasses.field(default="", repr=False)
    """The engine key (VLLM_API_KEY, the pool's Secret): callers of /v1/adapters must send it,
    as the engine's own API requires it; "" takes calls without (a platform with no key)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """Raises ValueError for a bad port or timeout, or anything but one trust method."""
        key = env.get("TOKENFLEET_TRUST_PUBLIC_KEY", "")
        identity = env.get("TOKENFLEET_TRUST_IDENTITY", "")
        issuer = env.get("TOKENFLEET_TRUST_ISSUER", "")
        if bool(key) == bool(identity) or bool(identity) != bool(issuer):
            raise ValueError(
                "set exactly one trust method: TOKENFLEET_TRUST_PUBLIC_KEY, or both "
                "TOKENFLEET_TRUST_IDENTITY and TOKENFLEET_TRUST_ISSUER"
            )
        return cls(
            port=int(env.get("TOKENFLEET_ADAPTER_PORT", "") or DEFAULT_PORT),
            address=env.get("TOKENFLEET_ADAPTER_ADDRESS", "") or DEFAULT_ADDRESS,
            engine_url=(env.get("TOKENFLEET_ENGINE_URL", "") or DEFAULT_ENGINE_URL).rstrip("/"),
            adapter_dir=Path(env.get("TOKENFLEET_ADAPTER_DIR", "") or DEFAULT_ADAPTER_DIR),
            public_key=Path(key) if key else None,
            identity=identity,
            issuer=issuer,
            fetch_timeout=float(env.get("TOKENFLEET_FETCH_TIMEOUT_SECONDS", "") or "30"),
            api_key=env.get("VLLM_API_KEY", ""),
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LoadRequest:
    """``POST /v1/adapters/load``: which files to serve under which name."""

    name: str
    uri: str
    digest: str  # the signed manifest's root digest, ``sha256:<hex>``
    signature_uri: str = ""  # empty: ``model.sig`` beside the files


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class UnloadRequest:
    """``POST /v1/adapters/unload``."""

    name: str


def _object(body: bytes) -> dict[str, object]:
    try:
        parsed = json.loads(body)
    except ValueError as error:
        raise BadRequest(f"the body is not JSON: {error}") from error
    if not isinstance(parsed, dict):
        raise BadRequest("the body must be a JSON object")
    return parsed


def _text(fields: Mapping[str, object], key: str, *, required: bool = True) -> str:
    value = fields.get(key, "")
    if not isinstance(value, str):
        raise BadRequest(f"{key!r} must be a string")
    if required and not value:
        raise BadRequest(f"{key!r} is required")
    return value


def parse_load(body: bytes) -> LoadRequest:
    """A load request; BadRequest names the first missing or malformed field."""
    fields = _object(body)
    unknown = sorted(set(fields) - {"name", "uri", "digest", "signatureUri"})
    if unknown:
        raise BadRequest(f"unknown fields: {', '.join(unknown)}")
    digest = _text(fields, "digest")
    if not _DIGEST.fullmatch(digest):
        raise BadRequest(f"'digest' must be sha256:<64 lowercase hex digits>, not {digest!r}")
    return LoadRequest(
        name=_text(fields, "name"),
        uri=_text(fields, "uri"),
        digest=digest,
        signature_uri=_text(fields, "signatureUri", required=False),
    )


def parse_unload(body: bytes) -> UnloadRequest:
    """An unload request; BadRequest when ``name`` is missing."""
    fields = _object(body)
    unknown = sorted(set(fields) - {"name"})
    if unknown:
        raise BadRequest(f"unknown fields: {', '.join(unknown)}")
    return UnloadRequest(name=_text(fields, "name"))


def cache_dir(adapter_dir: Path, digest: str) -> Path:
    """Where a remote adapter's verified files are kept: one directory per root digest, so a
    reload (after an eviction) finds them without downloading again."""
    return adapter_dir / digest.replace(":", "-")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Loaded:
    """An adapter this sidecar had the engine load."""

    name: str
    digest: str
    path: Path  # the verified directory the engine reads
    loaded_at: float  # seconds since the epoch

    def to_wire(self) -> dict[str, str]:
        return {"name": self.name, "digest": self.digest, "loadedAt": _rfc3339(self.loaded_at)}


def _rfc3339(epoch: float) -> str:
    moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class Why(enum.StrEnum):
    """What a load did; each maps to one HTTP status (:data:`STATUS`)."""

    LOADED = "Loaded"
    REPLACED = "Replaced"
    ALREADY_LOADED = "AlreadyLoaded"
    REFUSED = "Refused"
    UNLOADED_REFUSED = "UnloadedRefused"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """What a load does, in order: unload ``name`` from the engine, forget this sidecar's
    record of it, load the verified files under it."""

    why: Why
    unload_first: bool = False
    forget: bool = False
    load: bool = False


def asks_engine(*, request: LoadRequest, verdict: Verdict, loaded: Loaded | None) -> bool:
    """Whether :func:`decide` needs the engine's list: not for a refusal of files the engine
    does not serve, so a refusal is a 422 even while the engine is down."""
    return verdict.verified or (loaded is not None and loaded.digest == request.digest)


def decide(
    *, request: LoadRequest, verdict: Verdict, loaded: Loaded | None, engine_lists: bool
) -> Plan:
    """What to tell the engine about ``request``, now that its files got ``verdict``.

    ``loaded`` is what this sidecar loaded under the name before (None: nothing);
    ``engine_lists`` whether the engine serves the name now (it forgets everything when it
    restarts, and a restarted sidecar forgets what it had loaded).
    """
    same = loaded is not None and loaded.digest == request.digest
    if not verdict.verified:
        if same:
            return Plan(why=Why.UNLOADED_REFUSED, unload_first=engine_lists, forget=True)
        return Plan(why=Why.REFUSED)
    if same and engine_lists:
        return Plan(why=Why.ALREADY_LOADED)
    if engine_lists:
        return Plan(why=Why.REPLACED, unload_first=True, forget=True, load=True)
    return Plan(why=Why.LOADED, load=True)


#: The one reason → HTTP status table of the sidecar's answers.
STATUS: Mapping[str, int] = {
    Why.LOADED: 200,
    Why.REPLACED: 200,
    Why.ALREADY_LOADED: 200,
    Why.REFUSED: 422,
    Why.UNLOADED_REFUSED: 422,
    "BadRequest": 400,
    "NotLoaded": 404,
    "EngineError": 502,
}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """An HTTP answer: status and JSON body."""

    status: int
    body: Mapping[str, object]


def load_answer(*, request: LoadRequest, verdict: Verdict, why: Why) -> Answer:
    """200 with the name and verdict once the engine has it; 422 with the verdict otherwise."""
    body = json.loads(verdict.to_json())
    if STATUS[why] == 200:
        return Answer(status=200, body={"name": request.name, "verdict": body})
    return Answer(status=STATUS[why], body={"verdict": body})


def error_answer(kind: str, message: str) -> Answer:
    """A refusal that is not a verdict: ``kind`` is a key of :data:`STATUS`."""
    return Answer(status=STATUS[kind], body={"error": message})
