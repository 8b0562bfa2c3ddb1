"""Operator start and stop: settings, the Kubernetes client, and the reconcile loop task."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Any

import kopf

from tokenfleet.operator import leadership
from tokenfleet.operator.config import OperatorConfig
from tokenfleet.operator.exporter import Exporter
from tokenfleet.operator.k8s import Kube
from tokenfleet.operator.loop import Reconciler
from tokenfleet.operator.reconcilers.indexed import Indexes
from tokenfleet.operator.signals_source import PrometheusSignals


@kopf.on.startup()
async def start(*, settings: kopf.OperatorSettings, memo: Any, **kwargs: Any) -> None:
    settings.posting.level = logging.WARNING  # Events are ours to post, for state changes
    settings.scanning.disabled = True  # CRDs exist before the operator; no CRD watch needed
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60
    # kopf passes each index under its handler's name (live objects, filled once indexed).
    indexes = Indexes(
        pools=kwargs["pools_index"],
        models=kwargs["models_index"],
        tenants=kwargs["tenants_index"],
        pods=kwargs["pods_index"],
        sets=kwargs["sets_index"],
        nodes=kwargs["nodes_index"],
        adapters=kwargs["adapters_index"],
        routes=kwargs["routes_index"],
    )
    config = OperatorConfig.from_env()
    if not config.engine_key:  # the chart always sets one; a bare process may not
        logging.getLogger("tokenfleet.operator").warning(
            "no engine key (TOKENFLEET_ENGINE_API_KEY): engines take requests from any pod their "
            "NetworkPolicy admits; docs/security.md"
        )
    signals = PrometheusSignals(config.prometheus_url) if config.prometheus_url else None
    # Leader election (set up by __main__): the loop runs only while this replica leads, and
    # every write is fenced by the same Lease.
    election: leadership.Election | None = memo.get("election")
    # The namespaces kopf watches (__main__'s --namespace): the client's own lists stay there.
    namespaces: tuple[str, ...] = tuple(memo.get("namespaces") or ())
    kube = (
        leadership.fenced_kube(election, namespaces=namespaces)
        if election
        else Kube.connect(namespaces=namespaces)
    )
    exporter = Exporter()
    if config.metrics_port:
        exporter.serve(config.metrics_port, config.metrics_host)
    reconciler = Reconciler(
        kube=kube, indexes=indexes, config=config, signals=signals, exporter=exporter
    )
    memo.reconciler = reconciler
    memo.loop_task = asyncio.create_task(
        election.lead(reconciler.run) if election else reconciler.run()
    )


@kopf.on.cleanup()
async def stop(*, memo: Any, **_: Any) -> None:
    task: asyncio.Task[None] | None = memo.get("loop_task")
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    election: leadership.Election | None = memo.get("election")
    if election is not None:  # the loop has stopped: hand over now rather than on expiry
        await election.release()
    # kopf waits for a threading.Event stop flag in an executor thread; on a signal nobody sets
    # it, and interpreter exit would join that thread for good (SIGTERM took 31 s in the image,
    # then SIGKILL). Setting it here releases the thread: stopping is stopping either way.
    flag: threading.Event | None = memo.get("stop_flag")
    if flag is not None:
        flag.set()
