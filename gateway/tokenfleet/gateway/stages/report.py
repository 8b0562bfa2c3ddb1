"""Step 7, report: how a request ended, in the latency metrics, the request counter and the
access log — rendered from its trace once, at the end, whether it was served, refused (the one
place a refusal is counted, logged and rendered) or left by its client.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from tokenfleet.gateway.accesslog import AccessLog
from tokenfleet.gateway.intake import reject
from tokenfleet.gateway.live import Live
from tokenfleet.gateway.metrics import Metrics, model_label, observe_all
from tokenfleet.gateway.policy import usage
from tokenfleet.gateway.policy.rejections import Rejected
from tokenfleet.gateway.stages import context, events, tracing
from tokenfleet.gateway.targets import Target


class Report:
    """Metrics and the access log, with the catalog that bounds the model label."""

    def __init__(
        self,
        *,
        metrics: Metrics,
        live: Live,
        access_log: AccessLog | None,
        tracer: tracing.Tracer | None = None,
    ) -> None:
        """``access_log``: where each request's line goes (None: not written); ``tracer``:
        where its spans go (None: tracing is off)."""
        self._metrics, self._live, self._access = metrics, live, access_log
        self._tracer = tracer

    def begin(self, passage: context.Passage, request: web.Request) -> None:
        """A request begins: with tracing on, its trace notes when each event happened."""
        if self._tracer is not None:
            self._tracer.begin(passage, request)

    def observe(
        self, passage: context.Passage, answered: context.Answered
    ) -> web.StreamResponse | Rejected:
        """How the answer went (it has gone out: proxy answered the client before it returned):
        latency metrics and its ending (tokens are settled after)."""
        outcome, cls = answered.outcome, answered.target.cls
        if isinstance(outcome, Rejected):
            passage.trace.add(events.Ended("rejected", outcome.reason.value))
            return outcome  # nothing was served: nothing used
        model, m = answered.remote or answered.target.model.name, self._metrics
        pool = "" if answered.remote else answered.target.pool.key  # a remote is no pool's
        started, ttft_ms = passage.identity.started, None
        if outcome.first_byte_at is not None:
            m.ttft.labels(model, cls, pool).observe(outcome.first_byte_at - started)
            ttft_ms = round((outcome.first_byte_at - started) * 1000, 2)
        if outcome.gaps:
            observe_all(m.inter_token.labels(model, cls, pool), outcome.gaps)
        m.e2e.labels(model, cls).observe(time.monotonic() - started)
        ending = usage.ending(status=outcome.status, error=outcome.error)
        ended = events.Ended(*ending, status=outcome.status, ttft_ms=ttft_ms, delivered=True)
        passage.trace.add(ended)  # the whole answer went out: what follows cannot undo it
        assert outcome.response is not None  # proxy answers the client before it returns
        return outcome.response

    def refused(self, passage: context.Passage, rejected: Rejected) -> web.Response:
        """The one place a refusal is counted, logged and rendered."""
        served, spilled, _, _ = passage.trace.where()
        reason, status = rejected.reason.value, rejected.status
        self._count(passage, "rejected", reason, served=served, spilled=spilled, status=status)
        return reject(rejected, passage.trace.headers())

    def done(self, passage: context.Passage) -> None:
        """An answer went out: counted and logged as it ended."""
        served, spilled, ended, _ = passage.trace.where()
        outcome, reason = (ended.outcome, ended.reason) if ended else ("served", "")
        self._count(passage, outcome, reason, served=served, spilled=spilled)

    def left(self, passage: context.Passage) -> None:
        """The client went away (or the gateway is shutting down): upstream is already closed.
        One that left after the last byte (many clients close at once) was served."""
        served, spilled, ended, delivered = passage.trace.where()
        if delivered or passage.meter.complete:
            outcome, reason = (ended.outcome, ended.reason) if ended else ("served", "")
        else:
            outcome, reason = "cancelled", "client_disconnected"
        self._count(passage, outcome, reason, served=served, spilled=spilled)

    def _count(
        self,
        passage: context.Passage,
        outcome: str,
        reason: str,
        *,
        served: Target | None,
        spilled: events.Spilled | None,
        status: int | None = None,
    ) -> None:
        """One request in ``tokenfleet_gateway_requests_total`` with the tenant, and the
        namespace (of the pool) and the revision that served it, so a canary's error rate can
        be read apart; and its access-log record, rendered from the trace (``status``: a
        refusal's)."""
        identity, trace = passage.identity, passage.trace
        if self._tracer is not None:
            self._tracer.finish(passage, outcome=outcome, reason=reason, status=status)
        log: dict[str, Any] = {"request_id": identity.id, "route": identity.path}
        for event in trace:
            event.note(log)
        pool = str(log.get("pool", ""))
        asked = str(log.get("model", ""))  # any string the client sent: bounded here
        model = served.model.name if served else model_label(self._live.catalog, asked)
        revision = "" if spilled else trace.header(events.REVISION_HEADER)
        self._metrics.requests.labels(  # tenant, model, class, outcome, reason, ns, revision
            str(log.get("tenant", "")),
            spilled.model if spilled else model,
            served.cls if served else str(log.get("class", "")),
            outcome,
            reason,
            pool.split("/", 1)[0] if "/" in pool else "",
            revision,
        ).inc()
        if self._access is None:
            return
        if status is not None:
            log["status"] = status
        log["outcome"], log["reason"] = outcome, reason
        log["total_ms"] = round((time.monotonic() - identity.started) * 1000, 2)
        self._access.write(log)
