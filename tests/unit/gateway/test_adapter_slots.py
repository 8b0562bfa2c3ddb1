"""The adapter shell's bookkeeping without the network (``adapter_slots.AdapterSlots``): what
placement is fed (in-flight load, LRU order, running and loading adapters, the refused
cooldown), a request's use (most recently used, not evictable), and what the engines run for other
gateways (not evictable either), a listing merged (other
gateways' loads and evictions, the loaded gauge), and endpoints that left the catalog.

Loads themselves talk to a real adapter-loader: tests/integration/test_gateway_adapters.py.
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from tokenfleet.api.adapter import AdapterArtifact
from tokenfleet.gateway.adapter_catalog import Adapter, Loader
from tokenfleet.gateway.adapter_slots import AdapterSlots
from tokenfleet.gateway.metrics import AdapterMetrics
from tokenfleet.gateway.policy import adapters as placement
from tokenfleet.gateway.policy.adapter_access import Offer
from tokenfleet.gateway.policy.routing import Endpoint
from tokenfleet.signals import gateway as names

DIGEST = "sha256:" + "a" * 64
A, B = "http://10.0.0.1:8000", "http://10.0.0.2:8000"
LOADERS = {
    A: Loader(url="http://10.0.0.1:8002", pod="worker-a"),
    B: Loader(url="http://10.0.0.2:8002", pod="worker-b"),
}
ENDPOINTS = [Endpoint(url=u, pool="ns/online", models=frozenset({"m"})) for u in (A, B)]


def adapter(name: str = "x", slots: int = 2) -> Adapter:
    return Adapter(
        name=name,
        namespace="ns",
        resource=name,
        base_model="m",
        tenants=frozenset({"t"}),
        artifact=AdapterArtifact(uri="file:///x", digest=DIGEST),
        offer=Offer.OFFERED,
        slots=slots,
    )


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def slots(registry: CollectorRegistry) -> AdapterSlots:
    return AdapterSlots(AdapterMetrics.create(registry))


def place(
    slots: AdapterSlots,
    name: str = "x",
    busy: dict[str, tuple[float, frozenset[str]]] | None = None,
    **in_flight: int,
) -> placement.Placement | None:
    return slots.place(
        ENDPOINTS,
        adapter=adapter(name),
        loaders=LOADERS,
        in_flight={u: in_flight.get(k, 0) for k, u in (("a", A), ("b", B))},
        busy=busy or {},
        now=100.0,
    )


def loaded(registry: CollectorRegistry, name: str, pod: str) -> float | None:
    return registry.get_sample_value(
        names.ADAPTER_LOADED, {"namespace": "ns", "adapter": name, "pod": pod}
    )


def test_a_holder_wins_a_free_slot_is_filled_else_the_lru_goes(slots: AdapterSlots) -> None:
    assert place(slots, a=1) == placement.Placement(url=B, why=placement.Why.FREE_SLOT)
    slots.merge(B, {"x": DIGEST, "y": DIGEST}, asked_at=0.0)
    assert place(slots, b=3) == placement.Placement(url=B, why=placement.Why.LOADED)
    slots.merge(A, {"p": DIGEST, "q": DIGEST}, asked_at=0.0)
    assert place(slots, "z", b=1) == placement.Placement(url=A, why=placement.Why.EVICT, evict="p")


def test_a_running_adapter_is_recent_and_not_evictable(slots: AdapterSlots) -> None:
    place(slots)
    slots.merge(A, {"p": DIGEST, "q": DIGEST}, asked_at=0.0)
    slots.merge(B, {"r": DIGEST, "s": DIGEST}, asked_at=0.0)
    with slots.using(A, "p"), slots.using(B, "r"), slots.using(B, "s"):
        assert list(slots.replicas[A].lru) == ["q", "p"]
        assert place(slots, "z") == placement.Placement(url=A, why=placement.Why.EVICT, evict="q")
    assert slots.replicas[B].running == {}


def test_what_the_engine_runs_for_other_gateways_is_not_evicted(slots: AdapterSlots) -> None:
    place(slots)
    slots.merge(A, {"p": DIGEST, "q": DIGEST}, asked_at=0.0)
    slots.merge(B, {"r": DIGEST, "s": DIGEST}, asked_at=0.0)
    busy = {A: (50.0, frozenset({"p", "q"})), B: (50.0, frozenset({"r"}))}
    assert place(slots, "z", busy) == placement.Placement(url=B, why=placement.Why.EVICT, evict="s")


def test_what_the_engine_saw_of_this_gateways_finished_request_is_evictable(
    slots: AdapterSlots,
) -> None:
    """A scrape older than this gateway's last request on an adapter may have seen only that
    request: it does not protect the adapter."""
    place(slots)
    slots.merge(A, {"p": DIGEST, "q": DIGEST}, asked_at=0.0)
    slots.merge(B, {"r": DIGEST, "s": DIGEST}, asked_at=0.0)
    with slots.using(A, "p"):
        pass  # ends after the scrapes below (time.monotonic() is far past 1.0): LRU is q, p
    busy = {A: (1.0, frozenset({"p", "q"})), B: (1.0, frozenset({"r", "s"}))}
    assert slots.replicas[A].in_use(busy[A]) == {"q"}
    assert place(slots, "z", busy) == placement.Placement(url=A, why=placement.Why.EVICT, evict="p")


def test_a_refused_digest_keeps_the_worker_out_for_a_while(slots: AdapterSlots) -> None:
    slots.refused[(A, DIGEST)] = 160.0
    assert place(slots, b=9) == placement.Placement(url=B, why=placement.Why.FREE_SLOT)
    slots.refused[(A, DIGEST)] = 99.0  # expired
    assert place(slots, b=9) == placement.Placement(url=A, why=placement.Why.FREE_SLOT)


def test_a_listing_adds_strangers_drops_evictions_and_keeps_the_gauge(
    slots: AdapterSlots, registry: CollectorRegistry
) -> None:
    place(slots)
    slots.merge(A, {"p": DIGEST, "q": DIGEST}, asked_at=0.0)
    assert loaded(registry, "p", "worker-a") == 1
    slots.replicas[A].loaded_at["new"] = 5.0
    slots.replicas[A].lru["new"] = DIGEST
    slots.merge(A, {"q": DIGEST}, asked_at=4.0)  # p evicted elsewhere; "new" loaded since
    assert list(slots.replicas[A].lru) == ["q", "new"]
    assert loaded(registry, "p", "worker-a") is None
    slots.forget(A, "q")  # the engine said 404
    assert list(slots.replicas[A].lru) == ["new"] and loaded(registry, "q", "worker-a") is None


def test_endpoints_that_left_and_old_refusals_are_forgotten(
    slots: AdapterSlots, registry: CollectorRegistry
) -> None:
    place(slots)
    slots.merge(B, {"x": DIGEST}, asked_at=0.0)
    slots.refused[(A, DIGEST)], slots.refused[(B, DIGEST)] = 50.0, 150.0
    slots.retire({A: LOADERS[A]}, now=100.0)
    assert set(slots.replicas) == {A} and loaded(registry, "x", "worker-b") is None
    assert slots.refused == {(B, DIGEST): 150.0}  # an expired cooldown is dropped
