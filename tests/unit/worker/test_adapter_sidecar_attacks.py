"""Attacks on a worker's adapter-loader sidecar from a pod in the cluster (issue #35 finding 1).

Matrix: load, unload and listing calls without the engine key, with a wrong one, and with the
right one (only the last reaches the loader; /healthz stays open for the kubelet) × the
sidecar's own calls to its engine carrying the key × a remote adapter whose verification fails
(nothing is ever at its digest's cache path, during verification or after) and one that passes
(moved into place only once verified).
"""

from __future__ import annotations

import http.server
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tokenfleet.signing import fetch, verify
from tokenfleet.signing.verdict import Reason, Verdict
from tokenfleet.worker import adapter_files, adapter_plan, adapters, engine_lora

KEY = "engine-key-xyz"
DIGEST = "sha256:" + "b" * 64


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[str]:
    settings = adapter_plan.Settings(
        port=0,
        address="127.0.0.1",
        adapter_dir=tmp_path / "adapters",
        public_key=tmp_path / "key.pem",
        engine_url="http://127.0.0.1:9",  # discard: an engine nobody may reach through here
        api_key=KEY,
        fetch_timeout=1.0,
    )
    server = adapters.build(settings)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def call(url: str, *, body: dict[str, Any] | None = None, key: str | None = None) -> int:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


LOAD = {"name": "evil", "uri": "http://127.0.0.1:9/evil", "digest": DIGEST}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        pytest.param("/v1/adapters/load", LOAD, id="load"),
        pytest.param("/v1/adapters/unload", {"name": "evil"}, id="unload"),
        pytest.param("/v1/adapters", None, id="listing"),
    ],
)
@pytest.mark.parametrize(
    ("key", "refused"),
    [
        pytest.param(None, True, id="no-key"),
        pytest.param("guess", True, id="wrong-key"),
        pytest.param(KEY, False, id="engine-key"),
    ],
)
def test_the_sidecar_requires_the_engine_key(
    sidecar: str, path: str, body: dict[str, Any] | None, key: str | None, refused: bool
) -> None:
    status = call(sidecar + path, body=body, key=key)
    assert (status == 401) is refused, status


def test_healthz_stays_open_for_the_kubelet(sidecar: str) -> None:
    assert call(sidecar + "/healthz") == 200


def test_the_sidecar_sends_the_key_to_its_engine() -> None:
    seen: list[str] = []

    class Engine(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization") or "")
            data = b'{"data": []}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        engine_lora.Engine(url=f"http://127.0.0.1:{server.server_address[1]}", key=KEY).names()
    finally:
        server.shutdown()
    assert seen == [f"Bearer {KEY}"]


@pytest.mark.parametrize("passes", [False, True], ids=["refused", "verified"])
def test_a_download_is_verified_before_it_reaches_its_cache_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, passes: bool
) -> None:
    cached = adapter_plan.cache_dir(tmp_path, DIGEST)
    present_while_verifying: list[bool] = []

    def fake_fetch(uri: str, *, signature_uri: str, workdir: Path, timeout: float) -> None:
        (workdir / "model").mkdir(parents=True)
        (workdir / "model" / "adapter_model.safetensors").write_bytes(b"weights")
        (workdir / fetch.SIGNATURE_FILE).write_text("{}")

    def fake_verify(model_dir: Path, **_: Any) -> Verdict:
        present_while_verifying.append(cached.exists())
        if passes:
            return Verdict(reason=Reason.VERIFIED, message="ok")
        return Verdict(reason=Reason.DIGEST_MISMATCH, message="tampered")

    monkeypatch.setattr(fetch, "fetch", fake_fetch)
    monkeypatch.setattr(verify, "verify", fake_verify)
    files = adapter_files.AdapterFiles(
        directory=tmp_path, trust=verify.Trust(public_key=tmp_path / "k.pem"), timeout=1.0
    )
    checked = files.check(adapter_plan.LoadRequest(name="a", uri="https://x/a", digest=DIGEST))
    assert present_while_verifying == [False]  # nothing unverified at the final path, ever
    assert checked.verdict.verified is passes
    assert cached.exists() is passes
    assert checked.path == (cached / "model" if passes else None)
    assert not list(tmp_path.glob(".partial-*"))  # staging never outlives the check
