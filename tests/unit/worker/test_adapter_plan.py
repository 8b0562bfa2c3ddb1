"""The adapter-loader's pure part: its environment (defaults, exactly one trust method), its
request bodies (good, and each way a body is malformed), the load decision as a table over
(verdict, what this sidecar loaded, what the engine lists), and the status of every answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenfleet.signing.verdict import Reason, Verdict
from tokenfleet.worker import adapter_plan
from tokenfleet.worker.adapter_plan import BadRequest, Loaded, LoadRequest, Plan, Settings, Why

DIGEST = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64
KEY = {"TOKENFLEET_TRUST_PUBLIC_KEY": "/etc/tokenfleet/adapter-trust/public.pem"}


def test_settings_defaults_are_the_pods() -> None:
    assert Settings.from_env(KEY) == Settings(
        port=8002,
        address="0.0.0.0",
        engine_url="http://127.0.0.1:8000",
        adapter_dir=Path("/models/adapters"),
        public_key=Path("/etc/tokenfleet/adapter-trust/public.pem"),
    )


def test_settings_from_env() -> None:
    env = {
        "TOKENFLEET_ADAPTER_PORT": "9002",
        "TOKENFLEET_ADAPTER_ADDRESS": "10.0.0.7",
        "TOKENFLEET_ENGINE_URL": "http://127.0.0.1:41000/",
        "TOKENFLEET_ADAPTER_DIR": "/tmp/a",
        "TOKENFLEET_TRUST_IDENTITY": "ci@example.com",
        "TOKENFLEET_TRUST_ISSUER": "https://accounts.example.com",
        "TOKENFLEET_FETCH_TIMEOUT_SECONDS": "5",
    }
    settings = Settings.from_env(env)
    assert (settings.port, settings.address, settings.engine_url) == (
        9002,
        "10.0.0.7",
        "http://127.0.0.1:41000",
    )
    assert settings.public_key is None and settings.identity == "ci@example.com"
    assert (settings.adapter_dir, settings.fetch_timeout) == (Path("/tmp/a"), 5.0)


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({}, id="no-trust"),
        pytest.param({**KEY, "TOKENFLEET_TRUST_IDENTITY": "x", "TOKENFLEET_TRUST_ISSUER": "y"},
                     id="both-trusts"),
        pytest.param({"TOKENFLEET_TRUST_IDENTITY": "x"}, id="identity-without-issuer"),
        pytest.param({**KEY, "TOKENFLEET_ADAPTER_PORT": "http"}, id="bad-port"),
    ],
)  # fmt: skip
def test_settings_refuse(env: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        Settings.from_env(env)


def test_parse_load() -> None:
    body = {"name": "acme", "uri": "s3://b/acme", "digest": DIGEST, "signatureUri": "s3://b/a.sig"}
    assert adapter_plan.parse_load(json.dumps(body).encode()) == LoadRequest(
        name="acme", uri="s3://b/acme", digest=DIGEST, signature_uri="s3://b/a.sig"
    )


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        pytest.param(b"{", "not JSON", id="not-json"),
        pytest.param(b'"acme"', "JSON object", id="a-string"),
        pytest.param(b'{"uri": "file:///a", "digest": "%s"}', "'name' is required", id="no-name"),
        pytest.param(b'{"name": "a", "digest": "%s"}', "'uri' is required", id="no-uri"),
        pytest.param(b'{"name": "a", "uri": "file:///a"}', "'digest' is required", id="no-digest"),
        pytest.param(b'{"name": 3, "uri": "file:///a", "digest": "%s"}', "must be a string",
                     id="name-not-a-string"),
        pytest.param(b'{"name": "a", "uri": "file:///a", "digest": "sha256:ABC"}', "64 lowercase",
                     id="short-digest"),
        pytest.param(b'{"name": "a", "uri": "file:///a", "digest": "%s", "trust": "me"}',
                     "unknown fields: trust", id="a-request-names-no-trust"),
    ],
)  # fmt: skip
def test_parse_load_refuses(body: bytes, needle: str) -> None:
    with pytest.raises(BadRequest, match=needle):
        adapter_plan.parse_load(body.replace(b"%s", DIGEST.encode()))


def test_parse_unload() -> None:
    assert adapter_plan.parse_unload(b'{"name": "acme"}').name == "acme"
    with pytest.raises(BadRequest, match="unknown fields: digest"):
        adapter_plan.parse_unload(b'{"name": "acme", "digest": "x"}')


def test_cache_dir_is_per_digest() -> None:
    assert adapter_plan.cache_dir(Path("/models/adapters"), DIGEST) == Path(
        "/models/adapters/sha256-" + "a" * 64
    )


REQUEST = LoadRequest(name="acme", uri="file:///m/acme", digest=DIGEST)
VERIFIED = Verdict(reason=Reason.VERIFIED, digest=DIGEST)
REFUSED = Verdict(reason=Reason.DIGEST_MISMATCH, digest=DIGEST)


def loaded(digest: str = DIGEST) -> Loaded:
    return Loaded(name="acme", digest=digest, path=Path("/m/acme"), loaded_at=0.0)


@pytest.mark.parametrize(
    ("verdict", "before", "engine_lists", "plan"),
    [
        pytest.param(VERIFIED, None, False, Plan(why=Why.LOADED, load=True), id="new"),
        pytest.param(VERIFIED, loaded(), True, Plan(why=Why.ALREADY_LOADED), id="same-digest"),
        pytest.param(VERIFIED, loaded(), False, Plan(why=Why.LOADED, load=True),
                     id="engine-restarted-and-forgot"),
        pytest.param(VERIFIED, loaded(OTHER), True,
                     Plan(why=Why.REPLACED, unload_first=True, forget=True, load=True),
                     id="new-digest"),
        pytest.param(VERIFIED, None, True,
                     Plan(why=Why.REPLACED, unload_first=True, forget=True, load=True),
                     id="sidecar-restarted-engine-kept-it"),
        pytest.param(REFUSED, None, False, Plan(why=Why.REFUSED), id="refused-new"),
        pytest.param(REFUSED, loaded(OTHER), True, Plan(why=Why.REFUSED),
                     id="refused-new-digest-keeps-the-verified-one"),
        pytest.param(REFUSED, loaded(), True,
                     Plan(why=Why.UNLOADED_REFUSED, unload_first=True, forget=True),
                     id="loaded-files-changed-on-the-volume"),
        pytest.param(REFUSED, loaded(), False, Plan(why=Why.UNLOADED_REFUSED, forget=True),
                     id="loaded-files-changed-and-engine-forgot"),
    ],
)  # fmt: skip
def test_decide(verdict: Verdict, before: Loaded | None, engine_lists: bool, plan: Plan) -> None:
    assert (
        adapter_plan.decide(
            request=REQUEST, verdict=verdict, loaded=before, engine_lists=engine_lists
        )
        == plan
    )


@pytest.mark.parametrize(
    ("why", "status", "keys"),
    [
        pytest.param(Why.LOADED, 200, {"name", "verdict"}, id="loaded"),
        pytest.param(Why.REPLACED, 200, {"name", "verdict"}, id="replaced"),
        pytest.param(Why.ALREADY_LOADED, 200, {"name", "verdict"}, id="already"),
        pytest.param(Why.REFUSED, 422, {"verdict"}, id="refused"),
        pytest.param(Why.UNLOADED_REFUSED, 422, {"verdict"}, id="unloaded-refused"),
    ],
)
def test_load_answer(why: Why, status: int, keys: set[str]) -> None:
    answer = adapter_plan.load_answer(request=REQUEST, verdict=VERIFIED, why=why)
    assert answer.status == status and set(answer.body) == keys


@pytest.mark.parametrize(
    ("kind", "status"),
    [("BadRequest", 400), ("NotLoaded", 404), ("EngineError", 502)],
)
def test_error_answer(kind: str, status: int) -> None:
    answer = adapter_plan.error_answer(kind, "why")
    assert (answer.status, answer.body) == (status, {"error": "why"})


def test_loaded_on_the_wire() -> None:
    assert loaded().to_wire() == {
        "name": "acme",
        "digest": DIGEST,
        "loadedAt": "1970-01-01T00:00:00Z",
    }


@pytest.mark.parametrize(
    ("verdict", "before", "asks"),
    [
        pytest.param(VERIFIED, None, True, id="verified-asks"),
        pytest.param(REFUSED, None, False, id="refused-new-needs-no-engine"),
        pytest.param(REFUSED, loaded(OTHER), False, id="refused-other-digest-needs-no-engine"),
        pytest.param(REFUSED, loaded(), True, id="refused-loaded-digest-must-unload"),
    ],
)
def test_asks_engine(verdict: Verdict, before: Loaded | None, asks: bool) -> None:
    assert adapter_plan.asks_engine(request=REQUEST, verdict=verdict, loaded=before) is asks
