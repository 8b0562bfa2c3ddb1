"""The routes part of the catalog: ModelRoutes compiled for per-request decisions, each with its
classifier's weights loaded from the ConfigMap it names (docs/routes.md).

Built once per catalog, no I/O: the watched objects (or the static file) go in, immutable
:class:`RouteEntry` values come out. A route whose spec does not parse is left out (its name is
then unknown: 404, like a model's). A classifier whose ConfigMap or key is missing, or whose
weights do not parse, leaves the route served without a score: the rules that need one do not
match (``policy.model_routes``), and :attr:`RouteEntry.classifier_problem` says why, for the log
and the ``tokenfleet_gateway_route_classifier_ready`` gauge.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from tokenfleet.api.route import ClassifierRef, ModelRouteSpec, Remote
from tokenfleet.gateway.policy import classifier, model_routes

#: A ConfigMap's data by (namespace, name).
ConfigMaps = Mapping[tuple[str, str], Mapping[str, str]]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RouteEntry:
    """A ModelRoute as the gateway serves it."""

    route: model_routes.Route
    namespace: str  # of the ModelRoute ("" in static mode)
    resource: str  # its metadata.name
    classifier: classifier.Classifier | None = None
    classifier_problem: str = ""
    """Why the route's classifier has no weights ("" when it has them or needs none)."""
    needs_prices: bool = False
    """Some rule has a cost ceiling: the request's facts then carry the targets' prices."""
    scores: bool = False
    """Some rule reads the score and the weights loaded: each request is scored (decided once
    here, not per request)."""
    remotes: tuple[Remote, ...] = ()
    """Where its requests spill, in order (docs/routes.md "Spill")."""
    spill_on: tuple[str, ...] = ()
    currency: str = "USD"  # of the remotes' prices and budgets
    shared_with: frozenset[str] = frozenset()
    """The other namespaces its ``spec.sharedWith`` serves it to ("*": all)."""

    def served_to(self, namespace: str) -> bool:
        """Whether a caller in ``namespace`` may be served this route (its own namespace's,
        or shared with that namespace; in static mode, with no namespaces, every caller)."""
        return (
            not self.namespace
            or namespace == self.namespace
            or "*" in self.shared_with
            or namespace in self.shared_with
        )

    def spills_on(self, trigger: str) -> bool:
        return bool(self.remotes) and trigger in self.spill_on

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.resource}" if self.namespace else self.resource

    @property
    def name(self) -> str:
        """The public model name clients send."""
        return self.route.name


def classifier_of(
    ref: ClassifierRef | None, *, namespace: str, config_maps: ConfigMaps
) -> tuple[classifier.Classifier | None, str]:
    """The classifier the route names, or None and why not ("" when it names none)."""
    if ref is None:
        return None, ""
    data = config_maps.get((namespace, ref.config_map))
    if data is None:
        return None, f"ConfigMap {ref.config_map} not found (or not labelled for the gateway)"
    text = data.get(ref.key)
    if text is None:
        return None, f"ConfigMap {ref.config_map} has no key {ref.key}"
    try:
        return classifier.parse(text), ""
    except ValueError as exc:
        return None, f"ConfigMap {ref.config_map} key {ref.key}: {exc}"


def entry_of(
    *, namespace: str, resource: str, spec: ModelRouteSpec, config_maps: ConfigMaps
) -> RouteEntry:
    scorer, problem = classifier_of(spec.classifier, namespace=namespace, config_maps=config_maps)
    return RouteEntry(
        route=model_routes.compile_route(spec),
        namespace=namespace,
        resource=resource,
        classifier=scorer,
        classifier_problem=problem,
        needs_prices=any(r.max_cost_per_million_tokens is not None for r in spec.rules),
        scores=scorer is not None and any(r.match.uses_classifier() for r in spec.rules),
        remotes=tuple(spec.remotes),
        spill_on=tuple(spec.spill_on),
        currency=spec.currency,
        shared_with=frozenset(spec.shared_with),
    )


def routes_of(
    objects: Iterable[Mapping[str, Any]], *, config_maps: ConfigMaps
) -> dict[tuple[str, str], RouteEntry]:
    """Watched ModelRoutes by (namespace, public name), the first by namespace/name when two
    claim one name; a spec that does not parse is left out."""
    found: dict[tuple[str, str], RouteEntry] = {}
    for obj in sorted(objects, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"])):
        meta = obj["metadata"]
        try:
            spec = ModelRouteSpec.model_validate(obj.get("spec", {}))
        except ValueError:
            continue
        entry = entry_of(
            namespace=meta["namespace"], resource=meta["name"], spec=spec, config_maps=config_maps
        )
        found.setdefault((entry.namespace, entry.name), entry)
    return found


def config_maps_of(objects: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], dict[str, str]]:
    """Watched ConfigMaps' string data by (namespace, name)."""
    out = {}
    for obj in objects:
        meta, data = obj.get("metadata", {}), obj.get("data") or {}
        if isinstance(data, Mapping):
            out[(meta.get("namespace", ""), meta.get("name", ""))] = {
                str(k): v for k, v in data.items() if isinstance(v, str)
            }
    return out
