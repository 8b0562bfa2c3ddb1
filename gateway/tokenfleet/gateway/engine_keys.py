"""The engine key to send to an endpoint, by its namespace (tokenfleet.api.engine_key).

The gateway holds the installation's key; each namespace's engines and adapter sidecars serve
behind the key derived for that namespace. A namespace's key is derived on its first request
and kept (an HMAC per request would be waste); the keys never appear in a repr or a log line.
"""

from __future__ import annotations

from tokenfleet.api import engine_key

#: Namespaces whose keys are kept; past it the cache starts over (only churn gets there).
MAX_NAMESPACES = 4096


class EngineKeys:
    """Each namespace's engine key, derived once from the installation's."""

    def __init__(self, installation_key: str = "") -> None:
        self._installation = installation_key
        self._lines: dict[str, bytes] = {}

    def __repr__(self) -> str:
        return f"EngineKeys(configured={bool(self._installation)}, namespaces={len(self._lines)})"

    def key(self, namespace: str) -> str:
        """The key ``namespace``'s engines serve behind; "" when none is configured. Namespace
        "" (static mode: endpoints from a file, started by whoever wrote it) gets the
        configured key as it is."""
        if not namespace:
            return self._installation
        return engine_key.derive(self._installation, namespace)

    def header_line(self, namespace: str) -> bytes:
        """``Authorization: Bearer <key>\\r\\n`` for ``namespace``'s engines, b"" without a key."""
        line = self._lines.get(namespace)
        if line is None:
            key = self.key(namespace)
            line = b"Authorization: Bearer %s\r\n" % key.encode("latin-1") if key else b""
            if len(self._lines) >= MAX_NAMESPACES:
                self._lines.clear()
            self._lines[namespace] = line
        return line

    def headers(self, namespace: str) -> dict[str, str]:
        """The same as a header mapping (aiohttp's requests to the adapter sidecars)."""
        line = self.header_line(namespace)
        if not line:
            return {}
        name, _, value = line.decode("latin-1").rstrip("\r\n").partition(": ")
        return {name: value}
