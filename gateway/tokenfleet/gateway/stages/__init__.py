"""The stages of a request's passage, each built once in the app factory with exactly what it
needs, each returning what it decided (and adding it to the request's trace):

- :mod:`.intake` — steps 1-3: authenticate, validate, direct (ModelRoute), place, assign;
- :mod:`.cache` — the response cache: look up, replay a hit, keep a complete miss;
- :mod:`.quota` — the tenant's token quota;
- :mod:`.budget` — the tenant's budget (may downgrade the model);
- :mod:`.queue` — fallback, the cold-start hold and the pool's queue, then upstream;
- :mod:`.upstream` — revision, endpoint (routing, or adapter placement: one hook) and retries;
- :mod:`.spill` — on a local refusal, a ModelRoute's remotes;
- :mod:`.report` — metrics, the request counter and the access log, from the trace;
- :mod:`.settle` — the request's usage charged: counters, ledger, quota, budget.

:mod:`.context` is what they share: the request's identity, meter and trace. The recipe that
runs them in order is :mod:`tokenfleet.gateway.completion`.
"""

from __future__ import annotations

import dataclasses

from tokenfleet.gateway.stages.budget import Budgets
from tokenfleet.gateway.stages.cache import Cache
from tokenfleet.gateway.stages.intake import Intake
from tokenfleet.gateway.stages.queue import Queue
from tokenfleet.gateway.stages.quota import Quota
from tokenfleet.gateway.stages.report import Report
from tokenfleet.gateway.stages.settle import Settle
from tokenfleet.gateway.stages.spill import Spill

__all__ = ["Budgets", "Cache", "Intake", "Queue", "Quota", "Report", "Settle", "Spill", "Stages"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Stages:
    """The stages the recipe runs, built once per app."""

    intake: Intake
    cache: Cache
    quota: Quota
    budget: Budgets
    queue: Queue
    spill: Spill
    report: Report
    settle: Settle
