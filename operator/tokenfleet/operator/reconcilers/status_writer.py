"""The reconcilers' one way out: a status patched only when it differs from what is stored,
events posted (a courtesy: status already says it all), the exporter told, and an invalid spec
reported as Ready=False/InvalidSpec."""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

import pydantic
from kubernetes.client.exceptions import ApiException

from tokenfleet.api.base import Condition, rfc3339
from tokenfleet.api.pool import InferencePoolStatus
from tokenfleet.operator.exporter import Exporter
from tokenfleet.operator.k8s import Kube
from tokenfleet.operator.plan.reporting import Event

log = logging.getLogger("tokenfleet.operator")


class StatusWriter:
    """Writes what the planners decided about one object: its status and its events."""

    def __init__(self, *, kube: Kube, exporter: Exporter | None) -> None:
        self.kube = kube
        self.exporter = exporter  # None: fleet state is not exported (tests of the loop)

    async def invalid(
        self, body: dict[str, Any], exc: pydantic.ValidationError, now: datetime.datetime
    ) -> None:
        message = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())[
            :900
        ]
        log.warning(
            "%s %s/%s: invalid spec: %s",
            body["kind"],
            body["metadata"]["namespace"],
            body["metadata"]["name"],
            message,
        )
        status = InferencePoolStatus(
            observed_generation=body["metadata"].get("generation"),
            conditions=[
                Condition(
                    type="Ready",
                    status="False",
                    reason="InvalidSpec",
                    message=message,
                    last_transition_time=rfc3339(now),
                )
            ],
        )
        # a patch of these fields only: the pool's last counts and zones stay as they were
        await self.report(body, body["kind"], status.to_patch(), [], now)

    async def report(
        self,
        body: dict[str, Any],
        kind: str,
        status: dict[str, Any],
        events: list[Event],
        now: datetime.datetime,
    ) -> None:
        """Patch ``status`` (wire form: the planner's typed status, dumped by the caller) when
        it differs from what is stored, and post the events."""
        meta = body["metadata"]
        if self.exporter is not None:
            self.exporter.observe(kind, body, status)
        if status != (body.get("status") or {}):
            await asyncio.to_thread(
                self.kube.patch_status, kind, meta["namespace"], meta["name"], status
            )
        for event in events:
            log.info(
                "%s %s/%s: %s: %s",
                kind,
                meta["namespace"],
                meta["name"],
                event.reason,
                event.message,
            )
            try:
                await asyncio.to_thread(self.kube.post_event, body, event, now)
            except ApiException as exc:  # an Event is a courtesy: status already says it all
                log.warning("could not post %s event: %s", event.reason, exc.reason)
