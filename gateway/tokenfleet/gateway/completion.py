"""One completion request's way through the gateway, as a recipe.

:func:`answer` runs the request path of docs/architecture.md, each step once, each step a stage
built once in the app factory with what it needs (:mod:`tokenfleet.gateway.stages`):

1. **authenticate** — the API key → a Tenant;
2. **validate** — the body, the model and the tenant's right to it (a ModelRoute's public name
   is first directed to the served model its rules choose), the pool by context bucket, the
   prompt and ``max_tokens`` limits;
3. **assign** — the traffic class and the deadline: the Admitted request, built once;
4. **admit** — the response cache first (a hit is replayed and takes no tokens), the tenant's
   token quota, its budget (which may downgrade the model), then the pool's queue for the class
   (held through a cold start), on the model or its fallback; a ModelRoute's request the local
   side refused spills to the route's remotes;
5. **route** and 6. **proxy** — revision, endpoint and retries, relayed as it arrives;
7. **observe** — latency metrics; the request counter and the access log are rendered from the
   request's trace once, at the end, like a refusal;
8. **settle** — the one place a request's final usage is charged, whether it was served, failed
   or cancelled midway.

Each step returns a value or a Rejected; a Rejected ends the request and is rendered in one
place (:meth:`~tokenfleet.gateway.stages.report.Report.refused`). What a step decided goes into
the request's trace, never into another step's state. The business rules are pure functions in
``policy/``; this module only sequences the steps.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from tokenfleet.gateway.policy import bodies
from tokenfleet.gateway.policy.rejections import Rejected
from tokenfleet.gateway.stages import Stages, context, events, timeline


async def answer(request: web.Request, kind: bodies.Kind, stages: Stages) -> web.StreamResponse:
    """The answer, or the refusal rendered; a client that left is counted and logged."""
    passage = context.Passage.begin(request, kind)
    stages.report.begin(passage, request)  # a timeline for its spans, when tracing is on
    try:
        answered = await recipe(request, passage, stages)
    except (asyncio.CancelledError, ConnectionResetError):
        # The client went away (or we are shutting down): upstream is already closed. One that
        # left after the last byte was served, and is counted so once its settlement is done.
        await stages.settle.wait_out(passage)
        stages.report.left(passage)
        raise
    finally:
        stages.intake.release(passage)  # the body's memory allowance
    if isinstance(answered, Rejected):
        return stages.report.refused(passage, answered)
    stages.report.done(passage)
    return answered


async def recipe(
    request: web.Request, passage: context.Passage, stages: Stages
) -> web.StreamResponse | Rejected:
    """The request path, step by step: each step's refusal ends it."""
    trace = passage.trace
    admitted = await stages.intake.admit(request, passage)  # 1 authenticate 2 validate 3 assign
    if isinstance(admitted, Rejected):
        return admitted
    cached = await stages.cache.look_up(admitted, passage)  # 4 admit: the response cache...
    hit = cached.served is not None
    reservation = await stages.quota.reserve(admitted, hit=hit)  # ...the tenant's token quota...
    if isinstance(reservation, Rejected):
        return reservation
    trace.add(timeline.QUOTA_DONE)
    asked, hold = admitted, None  # a downgrade changes the model: the cache keeps the one asked
    try:
        if hit:  # ...a hit is replayed, settled as served with nothing charged
            trace.add(events.Ended("served", "cache_hit"))
            replayed = await stages.cache.replay(
                request, cached, admitted=admitted, passage=passage
            )
            trace.add(events.DELIVERED)
            return replayed
        budgeted = await stages.budget.check(admitted, trace)  # ...its budget...
        if isinstance(budgeted, Rejected):
            return ended(trace, budgeted)
        admitted, hold = budgeted
        trace.add(timeline.BUDGET_DONE)
        answered = await stages.queue.run(  # ...the pool's queue, 5 route, 6 proxy...
            admitted, request=request, passage=passage, capture_bytes=cached.capture_bytes
        )
        if isinstance(answered, Rejected) or isinstance(answered.outcome, Rejected):
            answered = await stages.spill.run(  # ...or the route's remotes
                admitted, answered, request=request, passage=passage
            )
        if isinstance(answered, Rejected):
            return ended(trace, answered)
        response = stages.report.observe(passage, answered)  # 7 observe
        if isinstance(response, Rejected):
            return response
        if not answered.remote:  # a complete local answer is kept for the next to ask
            await stages.cache.keep(cached, asked=asked, answered=answered, passage=passage)
        return response
    finally:
        await stages.settle.settle(passage, admitted, reservation, hold)  # 8 settle


def ended(trace: events.Trace, rejected: Rejected) -> Rejected:
    """A refusal after the quota was reserved: settled as rejected (nothing used)."""
    trace.add(events.Ended("rejected", rejected.reason.value))
    return rejected
