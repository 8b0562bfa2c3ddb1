"""The adapter-loader sidecar against a real llm-d-inference-sim (``--max-loras 2``) with real
model-signing signatures: a signed adapter is loaded and served under its name; tampered,
unsigned and foreign-signed ones are refused (422, the verdict's reason) and the engine never
hears of them; unload removes it; a remote adapter is downloaded once per digest yet verified on
every load (a tampered cached copy is refused); concurrent loads of one name make one engine
load; a new digest under a loaded name replaces it; bad bodies are 400, an unreachable engine
502 (yet a refusal still 422). Engine calls are counted in the simulator's own HTTP log
(``--log-http``)."""

from __future__ import annotations

import concurrent.futures
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from support import adapters
from support.adapters import Loader, Signed
from support.gateway import Sim, free_port, spawn, start_sim

LOAD_URI = 'requestURI="/v1/load_lora_adapter"'
UNLOAD_URI = 'requestURI="/v1/unload_lora_adapter"'
Build = Callable[[Path, tuple[Path, Path]], Signed]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("adapters")


@pytest.fixture(scope="module")
def key(root: Path) -> tuple[Path, Path]:
    return adapters.key_pair(root / "keys")


@pytest.fixture(scope="module")
def sim(root: Path) -> Iterator[Sim]:
    engine = start_sim(root, "base", "--max-loras", "2", "--log-http")
    yield engine
    engine.kill()


@pytest.fixture(scope="module")
def loader(root: Path, sim: Sim, key: tuple[Path, Path]) -> Iterator[Loader]:
    with adapters.running_loader(root, engine_url=sim.url, public_key=key[1]) as running:
        yield running


def engine_calls(sim: Sim, what: str) -> int:
    return sim.log.read_text(errors="replace").count(what)


def test_a_signed_adapter_is_loaded_and_answers(
    loader: Loader, sim: Sim, key: tuple[Path, Path], tmp_path: Path
) -> None:
    signed = adapters.signed_adapter(tmp_path, "acme", private_key=key[0])
    status, body = loader.load("acme-support", signed)
    assert status == 200, body
    assert body["name"] == "acme-support"
    assert body["verdict"]["reason"] == "Verified" and body["verdict"]["digest"] == signed.digest
    assert "acme-support" in adapters.engine_models(sim.url)
    assert adapters.chat_status(sim.url, "acme-support") == 200
    status, listing = adapters.call(f"{loader.url}/v1/adapters")
    assert status == 200
    entry = next(a for a in listing["adapters"] if a["name"] == "acme-support")
    assert entry["digest"] == signed.digest and entry["loadedAt"].endswith("Z")
    assert "acme-support" in loader.log.read_text() and "Verified" in loader.log.read_text()


def _tampered(root: Path, key: tuple[Path, Path]) -> Signed:
    signed = adapters.signed_adapter(root, "tampered", private_key=key[0])
    (signed.path / "adapter_model.safetensors").write_bytes(b"\x04" * 4096)
    return signed


def _unsigned(root: Path, key: tuple[Path, Path]) -> Signed:
    return adapters.signed_adapter(root, "unsigned", private_key=key[0], sign=False)


def _foreign(root: Path, key: tuple[Path, Path]) -> Signed:
    other_private, _ = adapters.key_pair(root / "other-keys")
    return adapters.signed_adapter(root, "foreign", private_key=other_private)


@pytest.mark.parametrize(
    ("build", "reasons"),
    [
        pytest.param(_tampered, {"DigestMismatch"}, id="file-changed-after-signing"),
        pytest.param(_unsigned, {"ArtifactUnreachable"}, id="no-signature"),
        pytest.param(_foreign, {"UntrustedSigner", "SignatureInvalid"}, id="another-key"),
    ],
)
def test_a_refused_adapter_never_reaches_the_engine(
    loader: Loader,
    sim: Sim,
    key: tuple[Path, Path],
    tmp_path: Path,
    build: Build,
    reasons: set[str],
) -> None:
    signed = build(tmp_path, key)
    loads_before = engine_calls(sim, LOAD_URI)
    status, body = loader.load("refused", signed)
    assert status == 422, body
    assert body["verdict"]["reason"] in reasons, body
    assert body["verdict"]["verified"] is False
    assert "refused" not in adapters.engine_models(sim.url)
    assert engine_calls(sim, LOAD_URI) == loads_before
    assert adapters.chat_status(sim.url, "refused") == 404


def test_unload_removes_it_from_the_engine(
    loader: Loader, sim: Sim, key: tuple[Path, Path], tmp_path: Path
) -> None:
    signed = adapters.signed_adapter(tmp_path, "beta", private_key=key[0])
    assert loader.load("beta", signed)[0] == 200
    assert adapters.chat_status(sim.url, "beta") == 200
    status, body = loader.unload("beta")
    assert (status, body) == (200, {"name": "beta"})
    assert "beta" not in adapters.engine_models(sim.url)
    assert adapters.chat_status(sim.url, "beta") == 404
    assert "beta" not in {
        a["name"] for a in adapters.call(f"{loader.url}/v1/adapters")[1]["adapters"]
    }
    assert loader.unload("beta")[0] == 404  # not loaded (any more)


def test_what_the_engine_forgot_is_loaded_again_and_unloads_cleanly(
    loader: Loader, sim: Sim, key: tuple[Path, Path], tmp_path: Path
) -> None:
    """As after an engine restart: the sidecar's record says loaded, the engine does not."""
    signed = adapters.signed_adapter(tmp_path, "zeta", private_key=key[0])
    assert loader.load("zeta", signed)[0] == 200
    assert adapters.call(f"{sim.url}/v1/unload_lora_adapter", {"lora_name": "zeta"})[0] == 200
    assert loader.load("zeta", signed)[0] == 200  # the same digest, but not "already loaded"
    assert "zeta" in adapters.engine_models(sim.url)
    assert adapters.call(f"{sim.url}/v1/unload_lora_adapter", {"lora_name": "zeta"})[0] == 200
    assert loader.unload("zeta") == (200, {"name": "zeta"})
    listing = adapters.call(f"{loader.url}/v1/adapters")[1]["adapters"]
    assert "zeta" not in {entry["name"] for entry in listing}


def test_a_remote_adapter_downloads_once_but_verifies_on_every_load(
    loader: Loader, sim: Sim, key: tuple[Path, Path], tmp_path: Path, root: Path
) -> None:
    signed = adapters.signed_adapter(tmp_path, "remote", private_key=key[0])
    with adapters.file_server(tmp_path) as (base, served):
        uri = f"{base}/remote"
        assert loader.load("remote", signed, uri=uri)[0] == 200
        first = len(served)
        assert first == 3  # the signature, then the two files it lists
        assert loader.unload("remote")[0] == 200
        status, body = loader.load("remote", signed, uri=uri)
        assert status == 200, body
        assert len(served) == first  # read from the per-digest directory
        cached = root / "adapters" / signed.digest.replace(":", "-") / "model"
        assert (cached / "adapter_model.safetensors").is_file()

        assert loader.unload("remote")[0] == 200
        (cached / "adapter_model.safetensors").write_bytes(b"\x05" * 4096)  # changed on the volume
        status, body = loader.load("remote", signed, uri=uri)
        assert status == 422 and body["verdict"]["reason"] == "DigestMismatch", body
        assert len(served) == first
        assert "remote" not in adapters.engine_models(sim.url)

        status, body = loader.load("remote", signed, uri=uri)  # the bad copy was not kept
        assert status == 200, body
        assert len(served) == 2 * first


def test_concurrent_loads_of_one_name_make_one_engine_load(
    loader: Loader, sim: Sim, key: tuple[Path, Path], tmp_path: Path
) -> None:
    signed = adapters.signed_adapter(tmp_path, "gamma", private_key=key[0])
    loads_before = engine_calls(sim, LOAD_URI)
    with concurrent.futures.ThreadPoolExecutor(max_workers=5) as pool:
        answers = list(pool.map(lambda _: loader.load("gamma", signed), range(5)))
    assert [status for status, _ in answers] == [200] * 5, answers
    assert engine_calls(sim, LOAD_URI) == loads_before + 1
    assert adapters.chat_status(sim.url, "gamma") == 200


def test_a_new_digest_under_a_loaded_name_replaces_it(
    loader: Loader, sim: Sim, key: tuple[Path, Path], tmp_path: Path
) -> None:
    first = adapters.signed_adapter(tmp_path / "v1", "delta", private_key=key[0])
    second = adapters.signed_adapter(tmp_path / "v2", "delta", private_key=key[0])
    shutil.copy(second.path / "adapter_config.json", second.path / "extra.json")
    second = Signed(
        path=second.path,
        digest=adapters.verify.sign(
            second.path, private_key=key[0], signature=second.path / "model.sig"
        ),
    )
    assert first.digest != second.digest
    assert loader.load("delta", first)[0] == 200
    unloads_before = engine_calls(sim, UNLOAD_URI)
    status, body = loader.load("delta", second)
    assert status == 200, body
    assert engine_calls(sim, UNLOAD_URI) == unloads_before + 1
    _, models = adapters.call(f"{sim.url}/v1/models")
    root = next(m["root"] for m in models["data"] if m["id"] == "delta")
    assert root == str(second.path)
    _, listing = adapters.call(f"{loader.url}/v1/adapters")
    assert next(a for a in listing["adapters"] if a["name"] == "delta")["digest"] == second.digest


@pytest.mark.parametrize(
    ("path", "body", "needle"),
    [
        pytest.param("load", b"{not json", "not JSON", id="bad-json"),
        pytest.param("load", b"[]", "JSON object", id="not-an-object"),
        pytest.param("load", b'{"name": "x", "uri": "file:///x"}', "'digest' is required",
                     id="no-digest"),
        pytest.param("load", b'{"name": "x", "uri": "file:///x", "digest": "md5:1"}', "sha256",
                     id="bad-digest"),
        pytest.param("unload", b"{}", "'name' is required", id="unload-without-name"),
    ],
)  # fmt: skip
def test_malformed_requests_are_400(loader: Loader, path: str, body: bytes, needle: str) -> None:
    status, answer = adapters.call(f"{loader.url}/v1/adapters/{path}", body)
    assert status == 400, answer
    assert needle in answer["error"]


def test_health(loader: Loader) -> None:
    assert adapters.call(f"{loader.url}/healthz") == (200, "ok")


def test_an_unreachable_engine_is_502(key: tuple[Path, Path], tmp_path: Path) -> None:
    signed = adapters.signed_adapter(tmp_path, "epsilon", private_key=key[0])
    dead = f"http://127.0.0.1:{free_port()}"
    with adapters.running_loader(tmp_path, engine_url=dead, public_key=key[1]) as lonely:
        status, body = lonely.load("epsilon", signed)
        assert status == 502, body
        assert "unreachable" in body["error"]
        assert adapters.call(f"{lonely.url}/v1/adapters")[1] == {"adapters": []}
        status, body = lonely.load("epsilon", _tampered(tmp_path / "t", key))
        assert status == 422, body  # a refusal needs no engine


def test_a_sidecar_without_trust_refuses_to_start(tmp_path: Path) -> None:
    """Whom to trust is the sidecar's own setting; without one it never serves a request."""
    log = tmp_path / "untrusting.log"
    env = {"TOKENFLEET_ADAPTER_PORT": str(free_port()), "TOKENFLEET_ADAPTER_ADDRESS": "127.0.0.1"}
    process = spawn([sys.executable, "-m", "tokenfleet.worker.adapters"], log, env=env)
    assert process.wait(timeout=30) == 2
    assert "TOKENFLEET_TRUST_PUBLIC_KEY" in log.read_text()
