"""Exact placement: how many replicas a pool needs in total and in each zone.

The total is the largest of the demand (``replicas.min`` or the autoscaler's wish), the warm
floor (``warm.perZone`` in every healthy zone) and zone-loss headroom (enough that losing the
``tolerateLoss`` largest zones still leaves the demand), capped at ``replicas.max``. It is split
across healthy zones as evenly as possible; the remainder goes to zones that already have more
replicas (fewer moves), then by a stable hash of pool and zone: deterministic for one pool, yet
spread across pools (ordering by zone name alone would stack every pool's remainder in the
first zone and exhaust it).

:func:`transition` then makes a move safe: zones that grow get their target at once, healthy
zones that shrink keep their replicas until every zone has its target ready (surge, then drain),
so no zone drops below its floor on the way. Lost zones drain at once.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from collections.abc import Mapping, Sequence


class Why(enum.StrEnum):
    """What decided a pool's size; shown in status.lastScaling.reason."""

    MIN_REPLICAS = "MinReplicas"
    DEMAND = "Demand"
    WARM_FLOOR = "WarmFloor"
    ZONE_LOSS_HEADROOM = "ZoneLossHeadroom"
    MAX_REPLICAS = "MaxReplicas"
    NO_HEALTHY_ZONE = "NoHealthyZone"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Zone:
    """A zone as placement sees it: healthy or not, and what it has now."""

    name: str
    healthy: bool
    current: int = 0  # replicas desired there now (before this decision)
    ready: int = 0


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """Replicas in total and per zone, and why."""

    total: int
    per_zone: dict[str, int]
    why: Why
    message: str
    needed: int  # what the demand and headroom asked for, before the cap


def _tie_break(pool: str, zone: str) -> str:
    return hashlib.sha256(f"{pool}/{zone}".encode()).hexdigest()


def split(total: int, zones: Sequence[Zone], pool: str = "") -> dict[str, int]:
    """``total`` over ``zones`` as evenly as possible; ties favour zones with more replicas,
    then a stable per-pool order."""
    if not zones:
        return {}
    base, remainder = divmod(total, len(zones))
    order = sorted(zones, key=lambda z: (-z.current, _tie_break(pool, z.name), z.name))
    return {z.name: base + (1 if i < remainder else 0) for i, z in enumerate(order)}


def _survives(total: int, zones: Sequence[Zone], lose: int, demand: int) -> bool:
    largest = sorted(split(total, zones).values(), reverse=True)[:lose]  # order-independent
    return total - sum(largest) >= demand


def place(
    *,
    demand: int,
    zones: Sequence[Zone],
    min_replicas: int,
    max_replicas: int,
    warm_per_zone: int,
    tolerate_loss: int,
    pool: str = "",
) -> Placement:
    """The pool's placement for a demand of ``demand`` replicas (0 when only bounds apply)."""
    healthy = [z for z in zones if z.healthy]
    if not healthy:
        return Placement(
            total=0,
            per_zone={z.name: 0 for z in zones},
            why=Why.NO_HEALTHY_ZONE,
            message="no healthy zone can host replicas",
            needed=max(demand, min_replicas),
        )
    total, why = (demand, Why.DEMAND) if demand > min_replicas else (min_replicas, Why.MIN_REPLICAS)
    message = f"{why.value}: {total} replicas"
    # A zone already lost spends the tolerance: the headroom exists to absorb that very loss
    # without cold starts. Surviving the loss of every zone is impossible, hence the clamp.
    lost = len(zones) - len(healthy)
    lose = max(0, min(tolerate_loss - lost, len(healthy) - 1))
    if lose > 0:
        need = total
        while not _survives(total, healthy, lose, need):
            total += 1
        if total > need:
            why = Why.ZONE_LOSS_HEADROOM
            message = f"losing the {lose} largest zone(s) must leave {need}: {total} replicas"
    floor = warm_per_zone * len(healthy)
    if floor > total:
        total, why = floor, Why.WARM_FLOOR
        message = f"warm floor: {warm_per_zone} per zone x {len(healthy)} healthy zones = {floor}"
    needed = total
    if total > max_replicas:
        total, why = max_replicas, Why.MAX_REPLICAS
        message = f"capped at replicas.max ({max_replicas}); {needed} wanted"
    per_zone = {z.name: 0 for z in zones} | split(total, healthy, pool)
    return Placement(total=total, per_zone=per_zone, why=why, message=message, needed=needed)


def transition(*, target: Mapping[str, int], zones: Sequence[Zone]) -> dict[str, int]:
    """Replicas to ask of each zone now, on the way from the current counts to ``target``."""
    settled = all(z.ready >= target.get(z.name, 0) for z in zones if z.healthy)
    step = {}
    for z in zones:
        want = target.get(z.name, 0)
        holding = z.healthy and want < z.current and not settled
        step[z.name] = z.current if holding else want
    return step
