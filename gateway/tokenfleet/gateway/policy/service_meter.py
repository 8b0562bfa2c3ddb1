"""How fast one pool serves: completions per second, the time a request holds its slot, the
token work of an average request and the time from a slot to the first token (pure counting).

The admission core reads these through the queue book (:class:`~tokenfleet.gateway.policy.
queue_book.QueueBook` is a :class:`ServiceMeter`): it counts a queue in average requests of
work and waits in service time. No I/O, no clock (times are passed in), no randomness.
"""

from __future__ import annotations

from tokenfleet.gateway.policy.admission import ewma_rate

#: Seconds between service-rate measurements when they are taken at completions (the gateway):
#: shorter windows make the average jump with every burst of completions.
RATE_WINDOW = 1.0
#: Weight of the newest request in the average time a request holds its slot.
HOLD_WEIGHT = 0.2
#: Weight of a new sample in the expected prefill and the mean work: ~10 requests of memory, so
#: they follow a change of prompt mix or cache hit ratio within a second at tens per second.
SAMPLE_WEIGHT = 0.1


class ServiceMeter:
    """A pool's service rate, hold time, mean work and prefill, each exponentially weighted."""

    def __init__(self, *, now: float = 0.0) -> None:
        self.service_rate = 0.0
        """Completions per second, exponentially weighted (:func:`admission.ewma_rate`)."""
        self.hold_seconds = 0.0
        """Seconds a completed request held its slot, exponentially weighted (0 until one did)."""
        self.completions = 0
        """Completions since the last measurement."""
        self.mean_cost = 0.0
        """Token work of a completed request, averaged (0 until one reported its cost)."""
        self.prefill = 0.0
        """Seconds from a slot to the first token, averaged (0 until one reported it)."""
        self.rate_at = now
        """When the rate was last measured (seconds on the caller's clock)."""

    def rate_for(self, capacity: int) -> float:
        """Requests per second ``capacity`` slots serve: the measured completion rate, or the
        rate the slots sustain by Little's law (capacity / hold time), whichever is higher.

        Completions per second measure demand while the pool is not saturated: after a quiet
        minute one completion reads as one request a minute, and a burst would be refused as
        unmeetable though every slot frees in a second. Hold time does not decay with idleness."""
        sustained = capacity / self.hold_seconds if self.hold_seconds > 0 else 0.0
        return max(self.service_rate, sustained)

    def served(
        self,
        *,
        completed: bool,
        held_seconds: float | None,
        cost: float | None,
        prefill: float | None,
    ) -> None:
        """A request gave its slot back: ``completed`` counts it in the rate and its
        ``held_seconds`` in the hold time, its ``cost`` (token work) in the mean work;
        ``prefill``: seconds from its slot to its first token, if it had one."""
        if completed:
            self.completions += 1
            if held_seconds is not None and held_seconds > 0:
                self.hold_seconds = _average(self.hold_seconds, held_seconds, HOLD_WEIGHT)
            if cost is not None and cost > 0:
                # the same weight as the hold time: the two make one average request
                self.mean_cost = _average(self.mean_cost, cost, HOLD_WEIGHT)
        if prefill is not None and prefill >= 0:
            self.prefill = _average(self.prefill, prefill, SAMPLE_WEIGHT)

    def measure(self, seconds: float) -> None:
        """Fold the completions of the last ``seconds`` into the service rate."""
        self.service_rate = ewma_rate(self.service_rate, self.completions, seconds)
        self.completions = 0

    def measure_at(self, now: float, *, every: float = RATE_WINDOW) -> None:
        """Measure the rate over the time since the last measurement, once ``every`` passed."""
        if now - self.rate_at >= every:
            self.measure(now - self.rate_at)
            self.rate_at = now


def _average(previous: float, sample: float, weight: float) -> float:
    """An exponentially weighted average of samples; the first sample (``previous`` ≤ 0, none
    yet) starts it."""
    return sample if previous <= 0 else previous + weight * (sample - previous)
