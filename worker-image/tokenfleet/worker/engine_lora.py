"""The engine's runtime LoRA API on localhost (vLLM with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``, or
llm-d-inference-sim, which has the same endpoints): list, load, unload. Stdlib HTTP only."""

from __future__ import annotations

import dataclasses
import json
import urllib.error
import urllib.request
from pathlib import Path

#: Seconds an engine call may take: vLLM reads an adapter's weights into CPU memory on load,
#: a few seconds for a rank-64 adapter of an 8B model; a minute leaves room for a busy disk.
ENGINE_TIMEOUT_SECONDS = 60.0


class EngineError(Exception):
    """The engine refused a call or could not be reached; the message is the engine's."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Engine:
    """One engine, addressed by its base URL (``http://127.0.0.1:8000``)."""

    url: str
    timeout: float = ENGINE_TIMEOUT_SECONDS
    key: str = dataclasses.field(default="", repr=False)
    """The engine key (vLLM's --api-key), sent as Authorization; "": none."""

    def names(self) -> frozenset[str]:
        """Every model id the engine serves now (the base model's names and its adapters)."""
        body = self._call("GET", "/v1/models", None)
        data = body.get("data", []) if isinstance(body, dict) else []
        return frozenset(str(m.get("id", "")) for m in data if isinstance(m, dict))

    def load(self, name: str, path: Path) -> None:
        self._call("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})

    def unload(self, name: str) -> None:
        self._call("POST", "/v1/unload_lora_adapter", {"lora_name": name})

    def _call(self, method: str, path: str, payload: dict[str, str] | None) -> object:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(  # noqa: S310 - the URL is the sidecar's own setting
            self.url + path,
            data=data,
            method=method,
            headers={
                "Content-Type": "application/json",
                **({"Authorization": f"Bearer {self.key}"} if self.key else {}),
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                raw = response.read()
        except urllib.error.HTTPError as error:
            raise EngineError(f"{method} {path}: {error.code} {_message(error.read())}") from error
        except (urllib.error.URLError, OSError) as error:
            unreachable = f"{method} {path}: engine unreachable at {self.url}: {error}"
            raise EngineError(unreachable) from error
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            return {}  # vLLM answers a load with plain text; success is the status


def _message(raw: bytes) -> str:
    """The engine's error message: OpenAI-style ``{"error": {"message"}}``, vLLM's
    ``{"message"}``, or the text as sent."""
    text = raw.decode(errors="replace").strip()
    try:
        body = json.loads(text)
    except ValueError:
        return text
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])
        if "message" in body:
            return str(body["message"])
    return text
