"""Which zones can host a pool's replicas right now, and why the others cannot.

A zone is lost when no node in it that offers the pool's accelerator is Ready (all NotReady or
none left), or when the pool's pods there have stayed unschedulable past a grace period.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence

#: How long pods may stay unschedulable in a zone before the zone counts as lost: long enough
#: for a scheduler retry and a slow node heartbeat, short against a minutes-long GPU cold start.
UNSCHEDULABLE_GRACE = datetime.timedelta(seconds=90)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    """What placement needs to know about one node."""

    name: str
    zone: str
    ready: bool
    offers_accelerator: bool


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ZoneHealth:
    """A zone's verdict with the reason a human reads in status and events."""

    name: str
    healthy: bool
    reason: str = "Healthy"
    message: str = ""


def assess(
    *,
    wanted: Sequence[str],
    nodes: Sequence[Node],
    unschedulable_since: Mapping[str, datetime.datetime],
    now: datetime.datetime,
    grace: datetime.timedelta = UNSCHEDULABLE_GRACE,
) -> list[ZoneHealth]:
    """Health of each zone, sorted by name.

    ``wanted`` lists the pool's zones; empty means every zone with a node offering the
    accelerator. ``unschedulable_since`` maps a zone to when the pool's oldest pod there became
    unschedulable (absent: none is).
    """
    offering = [n for n in nodes if n.offers_accelerator]
    names = sorted(wanted) if wanted else sorted({n.zone for n in offering})
    verdicts = []
    for zone in names:
        here = [n for n in offering if n.zone == zone]
        ready = [n for n in here if n.ready]
        since = unschedulable_since.get(zone)
        if not here:
            verdicts.append(
                ZoneHealth(
                    name=zone,
                    healthy=False,
                    reason="NoMatchingNodes",
                    message=f"{zone} lost: no node offers the accelerator",
                )
            )
        elif not ready:
            verdicts.append(
                ZoneHealth(
                    name=zone,
                    healthy=False,
                    reason="NodesNotReady",
                    message=f"{zone} lost: {len(here)} of {len(here)} nodes NotReady",
                )
            )
        elif since is not None and now - since >= grace:
            waited = int((now - since).total_seconds())
            verdicts.append(
                ZoneHealth(
                    name=zone,
                    healthy=False,
                    reason="Unschedulable",
                    message=f"{zone} lost: pods unschedulable for {waited} s",
                )
            )
        else:
            verdicts.append(ZoneHealth(name=zone, healthy=True))
    return verdicts
