"""What a ModelRoute's status is planned from besides the indexes (the shell of
:func:`tokenfleet.operator.plan.route_status.plan`): its classifier's ConfigMap, in the route's
namespace, and its remotes' key Secrets, in the gateway's.

One :class:`Reader` per pass: a key Secret several routes name is read once. Of a Secret only
its key names are kept (:meth:`tokenfleet.operator.k8s.Kube.secret_keys`); read errors raise,
so the loop logs them and the route's status waits for the next pass rather than go False.
"""

from __future__ import annotations

import asyncio

from tokenfleet.api.route import ModelRouteSpec
from tokenfleet.operator.k8s import Kube
from tokenfleet.operator.plan import route_status


class Reader:
    """Reads one pass's route inputs, remembering the key Secrets it has read."""

    def __init__(self, *, kube: Kube, gateway_namespace: str) -> None:
        self._kube = kube
        self._namespace = gateway_namespace
        self._keys: dict[str, frozenset[str] | None] = {}

    async def classifier(self, namespace: str, spec: ModelRouteSpec) -> route_status.Found | None:
        """The classifier's ConfigMap as found; None when the route has no classifier."""
        if spec.classifier is None:
            return None
        raw = await asyncio.to_thread(
            self._kube.config_map_found, namespace, spec.classifier.config_map
        )
        if raw is None:
            return route_status.Found()
        return route_status.Found(
            data=raw.get("data") or {}, labels=(raw.get("metadata") or {}).get("labels") or {}
        )

    async def key_secrets(self, spec: ModelRouteSpec) -> route_status.KeySecrets:
        """The key names of the Secrets the route's remotes name, in the gateway's namespace."""
        wanted = {r.api_key_secret.name for r in spec.remotes}
        for name in sorted(wanted - self._keys.keys()):
            self._keys[name] = await asyncio.to_thread(
                self._kube.secret_keys, self._namespace, name
            )
        return route_status.KeySecrets(
            namespace=self._namespace, keys={n: self._keys[n] for n in wanted}
        )
