"""Real parts for adapter-loader tests: signed LoRA adapter directories (real model-signing, real
EC keys), an HTTP file server that counts what it served, the sidecar process, and its client."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import http.server
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from support.cluster import wait_for
from support.gateway import free_port, listening, spawn, stop
from tokenfleet.signing import keys, verify

#: The files of a (tiny, fake-weighted) PEFT LoRA adapter.
ADAPTER_FILES = {
    "adapter_config.json": b'{"peft_type": "LORA", "r": 8, "lora_alpha": 16}',
    "adapter_model.safetensors": b"\x03" * 4096,
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Signed:
    """An adapter directory with ``model.sig`` inside, and the digest to pin."""

    path: Path
    digest: str

    @property
    def uri(self) -> str:
        return self.path.as_uri()


def signed_adapter(root: Path, name: str, *, private_key: Path, sign: bool = True) -> Signed:
    """``root/name`` with the adapter's files, signed by ``private_key`` unless ``sign`` is
    False (then the digest is what it would have been, and there is no signature)."""
    path = root / name
    for file, content in ADAPTER_FILES.items():
        (path / file).parent.mkdir(parents=True, exist_ok=True)
        (path / file).write_bytes(content + name.encode())  # distinct digests per name
    digest = verify.sign(path, private_key=private_key, signature=path / "model.sig")
    if not sign:
        (path / "model.sig").unlink()
    return Signed(path=path, digest=digest)


def key_pair(root: Path) -> tuple[Path, Path]:
    """(private, public) PEM files of a new P-256 key."""
    return keys.generate(root)


class _CountingHandler(http.server.SimpleHTTPRequestHandler):
    served: list[str]

    def do_GET(self) -> None:
        self.served.append(self.path)
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def file_server(directory: Path) -> Iterator[tuple[str, list[str]]]:
    """``directory`` over HTTP on a loopback port; yields (base URL, paths GET so far)."""
    served: list[str] = []
    handler = type("Handler", (_CountingHandler,), {"served": served})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(directory))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", served
    finally:
        server.shutdown()
        server.server_close()


def call(url: str, body: dict[str, Any] | bytes | None = None) -> tuple[int, Any]:
    """GET (no body) or POST JSON; returns (status, parsed JSON or text)."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method="GET" if body is None else "POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


@dataclasses.dataclass(kw_only=True)
class Loader:
    """A running adapter-loader sidecar process."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def load(self, name: str, signed: Signed, *, uri: str = "") -> tuple[int, Any]:
        body = {"name": name, "uri": uri or signed.uri, "digest": signed.digest}
        return call(f"{self.url}/v1/adapters/load", body)

    def unload(self, name: str) -> tuple[int, Any]:
        return call(f"{self.url}/v1/adapters/unload", {"name": name})


@contextlib.contextmanager
def running_loader(
    tmp: Path, *, engine_url: str, public_key: Path, adapter_dir: Path | None = None
) -> Iterator[Loader]:
    """The real sidecar (``python -m tokenfleet.worker.adapters``) on a free loopback port."""
    port = free_port()
    log = tmp / f"adapter-loader-{port}.log"
    env = {
        "TOKENFLEET_ADAPTER_PORT": str(port),
        "TOKENFLEET_ADAPTER_ADDRESS": "127.0.0.1",
        "TOKENFLEET_ENGINE_URL": engine_url,
        "TOKENFLEET_ADAPTER_DIR": str(adapter_dir or tmp / "adapters"),
        "TOKENFLEET_TRUST_PUBLIC_KEY": str(public_key),
    }
    process = spawn([sys.executable, "-m", "tokenfleet.worker.adapters"], log, env=env)
    loader = Loader(url=f"http://127.0.0.1:{port}", process=process, log=log)
    try:
        wait_for(
            "the adapter-loader to listen",
            lambda: listening(port) or process.poll() is not None,
            timeout=30,
        )
        assert process.poll() is None, log.read_text()[-2000:]
        yield loader
    finally:
        stop(process)


def engine_models(engine_url: str) -> set[str]:
    """The model ids an engine's /v1/models lists."""
    status, body = call(f"{engine_url}/v1/models")
    assert status == 200, body
    return {m["id"] for m in body["data"]}


def chat_status(engine_url: str, model: str) -> int:
    status, _ = call(
        f"{engine_url}/v1/chat/completions",
        {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    )
    return status
