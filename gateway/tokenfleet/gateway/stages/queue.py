"""Step 4's queue: the request on its model, or on its fallback when the model has no ready
replica or no room (:mod:`~tokenfleet.gateway.policy.fallback`), held through a cold start,
then a slot in its pool's queue for its class (:mod:`..queues`), then upstream.

The slot is held while the request runs upstream and given back whatever happens, with what the
request really produced (fair queuing's correction) and how long it took to its first token
(admission's estimates).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from aiohttp import web

from tokenfleet.gateway import queues
from tokenfleet.gateway.live import Live
from tokenfleet.gateway.metrics import Metrics
from tokenfleet.gateway.policy import admission, bodies, fallback
from tokenfleet.gateway.policy.rejections import Reason, Rejected
from tokenfleet.gateway.route_catalog import RouteEntry
from tokenfleet.gateway.stages import context, events
from tokenfleet.gateway.stages.upstream import Upstream, Work
from tokenfleet.gateway.targets import Admitted, Target


class Queue:
    """Pools' queues, with the catalog they are sized by and the upstream they lead to."""

    def __init__(
        self,
        *,
        live: Live,
        admitter: queues.Admitter,
        upstream: Upstream,
        metrics: Metrics,
        fair_queuing: bool,
        cold_start_seconds: float,
        spills_instead: Callable[[RouteEntry], bool],
    ) -> None:
        """``spills_instead``: whether a route's request with no ready replica goes to a warm
        remote at once rather than wait for a cold start (the spill stage knows)."""
        self._live, self._admitter, self._upstream = live, admitter, upstream
        self._metrics, self._fair_queuing = metrics, fair_queuing
        self._cold_start, self._spills_instead = cold_start_seconds, spills_instead

    async def run(
        self,
        admitted: Admitted,
        *,
        request: web.Request,
        passage: context.Passage,
        capture_bytes: int,
    ) -> context.Answered | Rejected:
        """Steps 4-6 on the model, or on its fallback when the model has no ready replica or
        no room; Rejected if the request never started."""
        live, primary, spare = self._live, admitted.primary, admitted.fallback
        ready = live.ready(primary)
        why = fallback.first(model_ready=ready, fallback_ready=live.ready(spare))
        if why is None:  # with no replica anywhere, it is held for the model's cold start
            answered = await self._queued(
                admitted, primary, request, passage, capture_bytes, ready=ready
            )
            if not isinstance(answered, Rejected):
                return answered
            why = fallback.after(answered.reason, fallback_ready=live.ready(spare))
            if why is None:
                return answered
        assert spare is not None  # a fallback is only ready if there is one
        self._metrics.routing.fallbacks.labels(primary.model.name, spare.model.name, why).inc()
        passage.trace.add(events.FellBack(primary.model.name, why, spare.pool.key, spare.cls))
        return await self._queued(admitted, spare, request, passage, capture_bytes)

    async def _queued(
        self,
        admitted: Admitted,
        to: Target,
        request: web.Request,
        passage: context.Passage,
        capture_bytes: int,
        *,
        ready: bool | None = None,
    ) -> context.Answered | Rejected:
        """Hold through a cold start, wait for a slot in the class's queue, then route and
        proxy; Rejected if it never started (``ready``: whether ``to`` has a ready replica,
        when the caller just asked)."""
        live, m, key, cls = self._live, self._metrics, to.pool.key, to.cls
        queue = self._admitter.queue(key)
        if not (live.ready(to) if ready is None else ready):
            # a route that spills when unavailable sends it to a warm remote, not a cold start
            spills = admitted.route is not None and self._spills_instead(admitted.route)
            cold = await self._held(to, admitted.due, window=0.0 if spills else None)
            if cold is not None:
                return cold
        capacity = live.capacity(key)
        m.pool_arrivals.labels(key, cls).inc()
        m.queue_depth.labels(key, cls).set(queue.depth(cls) + 1)
        fair = queues.Fair.of(
            admitted.tenant if self._fair_queuing else None,
            prompt_tokens=admitted.parsed.prompt_tokens,
            max_tokens=admitted.output_tokens,
        )
        # admission judges waits in token work (issue 15): prompt plus reserved output
        cost = admission.work(
            prompt_tokens=admitted.parsed.prompt_tokens, max_tokens=admitted.output_tokens
        )
        refused = await self._admitter.acquire(
            pool=key,
            policies=to.pool.classes,
            capacity=capacity,
            cls=cls,
            deadline=admitted.due,
            fair=fair,
            cost=cost,
        )
        self._observe(to)
        if refused is not None:
            m.pool_refusals.labels(key, cls, refused.reason.value).inc()
            return refused
        holding_since = time.monotonic()
        m.queue_wait.labels(key, cls).observe(holding_since - passage.identity.started)
        m.in_flight.labels(key, cls).inc()
        passage.trace.add(events.Started(to))
        first_byte_at: float | None = None
        try:
            max_tokens = admission.max_tokens(
                policy=to.pool.classes[cls],
                load=queue.load(capacity),
                requested=admitted.max_tokens,
                sequences=admitted.parsed.sequences,
            )
            parsed = admitted.parsed
            work = Work(
                parsed=parsed,
                model=to.model,
                pool=to.pool,
                body=bodies.upstream(
                    parsed, model=to.model.name, salt=admitted.salt, max_tokens=max_tokens
                ),
                due=admitted.due,
                capture_bytes=capture_bytes,
            )
            outcome = await self._upstream.serve(work, request=request, passage=passage)
            if parsed.stream and not isinstance(outcome, Rejected):
                # a stream's first byte is its first token; a whole answer's is its last
                first_byte_at = outcome.first_byte_at
            degraded = max_tokens < admitted.max_tokens
            return context.Answered(target=to, outcome=outcome, degraded=degraded)
        finally:
            m.in_flight.labels(key, cls).dec()
            self._admitter.release(
                pool=key,
                policies=to.pool.classes,
                capacity=live.capacity(key),
                cls=cls,
                held_seconds=time.monotonic() - holding_since,
                fair=fair,
                correction=fair.settle(passage.meter.produced, reserved=admitted.output_tokens),
                cost=cost,
                prefill=None if first_byte_at is None else first_byte_at - holding_since,
            )
            self._observe(to)

    async def _held(self, to: Target, due: float, *, window: float | None) -> Rejected | None:
        """No ready replica: wait for one (a cold start) within the window (the settings'
        cold start by default) and the deadline."""
        live = self._live
        wait = self._cold_start if window is None else window
        until = min(due, time.monotonic() + wait)
        while not live.ready(to):
            left = until - time.monotonic()
            if left <= 0:
                return Rejected(
                    reason=Reason.NO_ENDPOINTS,
                    retry_after=max(1.0, self._cold_start),
                    message=f"no ready replica serves '{to.model.name}' right now",
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(live.changed.wait(), timeout=left)
        return None

    def _observe(self, to: Target) -> None:
        q = self._admitter.queue(to.pool.key)
        self._metrics.observe_queue(
            to.pool.key, to.cls, q.depth(to.cls), q.oldest_age(to.cls, time.monotonic())
        )
