"""What every Tenant's status is planned from, read once per pass (the shell of
:func:`tokenfleet.operator.plan.tenant_status.plan_from`).

The labelled key Secrets' metadata (one list), the gateways' usage counters by tenant and pool
since each budget period's start in use (one read per period, not per tenant), the gateways'
last-served gauge, and the pools' prices (from the index the loop already holds). Whatever is
unreadable comes back as None or empty, so the status leaves it out rather than report zero.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from tokenfleet.operator.k8s import Kube
from tokenfleet.operator.plan import tenant_status
from tokenfleet.operator.signals_source import PrometheusSignals

log = logging.getLogger("tokenfleet.operator")


async def read(
    *,
    kube: Kube,
    signals: PrometheusSignals | None,
    tenants: Sequence[Mapping[str, Any]],
    pools: Iterable[Mapping[str, Any]],
    now: datetime.datetime,
) -> tenant_status.Inputs:
    """Everything :func:`~tokenfleet.operator.plan.tenant_status.plan_from` needs this pass."""
    usage, last_served = await _usage(signals, tenants, now)
    return tenant_status.Inputs(
        key_secrets=await _key_secrets(kube),
        usage=usage,
        last_served=last_served,
        rates=tenant_status.pool_rates(pools),
    )


async def _usage(
    signals: PrometheusSignals | None, tenants: Sequence[Mapping[str, Any]], now: datetime.datetime
) -> tuple[
    dict[datetime.datetime, dict[str, dict[str, dict[str, int]]]], dict[str, datetime.datetime]
]:
    """Per budget period start in use: tenant → pool → its usage counters' growth since then
    (a period Prometheus could not answer is absent); and tenant → when a gateway last served
    it, over the longest period."""
    if signals is None:
        return {}, {}
    found = {}
    starts = {tenant_status.period_of(b, now).start for b in tenants}
    for start in starts:
        seconds = int((now - start).total_seconds())
        counters = await asyncio.to_thread(signals.tenant_usage, seconds)
        if counters is not None:
            found[start] = counters
    longest = int((now - min(starts)).total_seconds()) if starts else 0
    last = await asyncio.to_thread(signals.tenant_last_served, max(60, longest))
    return found, last or {}


async def _key_secrets(kube: Kube) -> dict[tuple[str, str], frozenset[str]] | None:
    """Data entry names of the labelled key Secrets (metadata only); None if unreadable,
    so tenant status falls back to the key-count annotation rather than report 0 keys."""
    try:
        metas = await asyncio.to_thread(kube.key_secret_metadata)
    except (ApiException, HTTPError, OSError) as exc:
        log.warning("key Secrets' metadata unreadable, using annotations: %s", exc)
        return None
    return tenant_status.key_index(metas)
