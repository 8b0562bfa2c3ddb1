"""``python3 -m tokenfleet.worker.adapters``: the adapter-loader sidecar of a worker pod.

The gateway asks it (port ``adapters``, 8002, with the engine key: every call but /healthz
needs it) to load a tenant's LoRA adapter into the pod's
engine; it fetches the files, verifies them with OpenSSF model-signing against its own trust
mount, and only then calls the engine's ``/v1/load_lora_adapter`` on localhost (docs/adapters.md
has the protocol). Stdlib HTTP on purpose: the worker image is vLLM's plus
``tokenfleet.signing`` and this package, with no web framework to add or patch.

This module is the HTTP shell: parse (adapter_plan) → act (adapter_loads.Loads) → answer.
"""

from __future__ import annotations

import hmac
import http.server
import json
import logging
import os
import sys
from collections.abc import Mapping

from tokenfleet.signing import verify
from tokenfleet.worker import adapter_files, adapter_loads, adapter_plan, engine_lora
from tokenfleet.worker.adapter_plan import Answer, BadRequest

#: Load and unload bodies are a few hundred bytes; anything much larger is not one of them.
MAX_BODY_BYTES = 64 * 1024
EXIT_CONFIG = 2


class Server(http.server.ThreadingHTTPServer):
    """One thread per request (a load may take minutes: other names must not wait)."""

    daemon_threads = True

    def __init__(self, settings: adapter_plan.Settings, loads: adapter_loads.Loads) -> None:
        super().__init__((settings.address, settings.port), Handler)
        self.loads = loads
        self.authorization = f"Bearer {settings.api_key}".encode() if settings.api_key else b""


class Handler(http.server.BaseHTTPRequestHandler):
    server: Server

    def _refused(self) -> bool:
        """Answer 401 unless the request carries the engine key (only /healthz is open)."""
        expected = self.server.authorization
        given = (self.headers.get("Authorization") or "").encode()
        if not expected or hmac.compare_digest(given, expected):
            return False
        self._send(Answer(status=401, body={"error": "the engine key is required"}))
        return True

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._send_text(200, "ok")
        elif self._refused():
            return
        elif self.path == "/v1/adapters":
            self._send(self.server.loads.listing())
        else:
            self._send(Answer(status=404, body={"error": f"no such path {self.path}"}))

    def do_POST(self) -> None:
        if self._refused():
            return
        try:
            body = self._body()
            if self.path == "/v1/adapters/load":
                answer = self.server.loads.load(adapter_plan.parse_load(body))
            elif self.path == "/v1/adapters/unload":
                answer = self.server.loads.unload(adapter_plan.parse_unload(body))
            else:
                answer = Answer(status=404, body={"error": f"no such path {self.path}"})
        except BadRequest as error:
            answer = adapter_plan.error_answer("BadRequest", str(error))
        self._send(answer)

    def _body(self) -> bytes:
        try:
            length = int(self.headers.get("Content-Length") or "0")
        except ValueError as error:
            raise BadRequest("Content-Length is not a number") from error
        if length > MAX_BODY_BYTES:
            raise BadRequest(f"the body is over {MAX_BODY_BYTES} bytes")
        return self.rfile.read(length)

    def _send(self, answer: Answer) -> None:
        data = json.dumps(answer.body, separators=(",", ":")).encode()
        self.send_response(answer.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_text(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per load/unload comes from adapter_loads; access lines are noise


def build(settings: adapter_plan.Settings) -> Server:
    """The server for ``settings``, bound and ready to ``serve_forever``."""
    trust = verify.Trust(
        public_key=settings.public_key, identity=settings.identity, issuer=settings.issuer
    )
    files = adapter_files.AdapterFiles(
        directory=settings.adapter_dir, trust=trust, timeout=settings.fetch_timeout
    )
    engine = engine_lora.Engine(url=settings.engine_url, key=settings.api_key)
    loads = adapter_loads.Loads(files=files, engine=engine)
    return Server(settings, loads)


def main(env: Mapping[str, str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        settings = adapter_plan.Settings.from_env(env)
        server = build(settings)
    except (ValueError, OSError) as error:
        print(f"tokenfleet adapter-loader: {error}", file=sys.stderr)
        return EXIT_CONFIG
    logging.getLogger("tokenfleet.worker.adapters").info(
        "adapter-loader on %s:%d, engine %s, adapters in %s",
        settings.address,
        settings.port,
        settings.engine_url,
        settings.adapter_dir,
    )
    with server:
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(dict(os.environ)))
