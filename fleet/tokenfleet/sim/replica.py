"""One simulated vLLM replica: continuous batching as a fluid model over engine steps.

Each engine step decodes one token for every running sequence and prefills a chunk of the
oldest admitted prompt (chunked prefill, up to ``max_num_batched_tokens`` per step). A step
takes ``base + per_sequence x running + per_token x chunk`` seconds. Within a tick the replica
jumps from event to event (a prompt finishes prefilling, a sequence finishes decoding) instead
of stepping, so its cost is per request, not per step. Every running sequence advances by one
token per step, so a sequence finishes when the replica's step counter passes its start plus
its output tokens: a heap keyed by that step replaces per-sequence bookkeeping.

Prompts opening with a cached shared prefix prefill only their remainder (an LRU of prefixes).
KV blocks are reserved for the whole context at admission, as a conservative vLLM would.

LoRA adapters, as vLLM serves them, in ``max_loras`` slots (:mod:`tokenfleet.sim.lora`): a
request whose adapter has no slot takes one when it reaches the head of the queue, then waits
for the load; while no slot can be had it is skipped and later requests go ahead, as vLLM's
scheduler skips them. A base-model request never looks at any of this.
"""

from __future__ import annotations

import collections
import heapq
from collections.abc import Callable
from typing import Final

from tokenfleet.sim.lora import Slots
from tokenfleet.sim.scenario import Performance

INF: Final = float("inf")


class Request:
    """One request's life; times are seconds from the start (None until they happen)."""

    __slots__ = (
        "adapter",
        "adapter_hit",
        "arrival",
        "cls",
        "deadline",
        "dispatched",
        "finished",
        "first_token",
        "index",
        "input",
        "outcome",
        "output",
        "pool",
        "prefill_left",
        "prefix",
        "prefix_tokens",
        "reason",
        "replica",
        "stream",
        "zone",
    )

    def __init__(
        self,
        *,
        index: int,
        stream: int,
        cls: str,
        arrival: float,
        deadline: float,
        input_tokens: int,
        output_tokens: int,
        prefix: int,
        prefix_tokens: int,
        zone: str = "",
        adapter: int = -1,
    ) -> None:
        self.index = index
        self.stream = stream
        self.cls = cls
        self.arrival = arrival
        self.deadline = deadline
        self.input = input_tokens
        self.output = output_tokens
        self.prefix = prefix  # shared-prefix group, -1 for none
        self.prefix_tokens = prefix_tokens
        self.zone = zone  # of the gateway replica it reached ("" → no zone preference)
        self.adapter = adapter  # LoRA adapter id, -1 for the base model
        self.adapter_hit = NO_ADAPTER if adapter < 0 else ADAPTER_UNSENT
        self.pool = ""
        self.dispatched: float | None = None
        self.first_token: float | None = None
        self.finished: float | None = None
        self.outcome = ""  # served | shed | timed_out | failed
        self.reason = ""
        self.replica: Replica | None = None
        self.prefill_left = 0.0


Finish = Callable[[Request, float], None]

#: ``Request.adapter_hit``: no adapter; its adapter was loaded where it went; it was not; it
#: never went to a replica (shed or timed out at the gateway). The recorder keeps these codes.
NO_ADAPTER, ADAPTER_HIT, ADAPTER_MISS, ADAPTER_UNSENT = 0, 1, 2, 3


def mark_first_token(req: Request, at: float) -> None:
    req.first_token = at


class Replica:
    """A replica's engine state; ``advance`` moves it through one tick."""

    __slots__ = (
        "busy_decode",
        "busy_prefill",
        "busy_window",
        "clock",
        "created",
        "decoding",
        "draining",
        "id",
        "in_flight",
        "kv_used",
        "lora",
        "perf",
        "prefill",
        "prefilling",
        "prefixes",
        "ready_at",
        "running",
        "separate",
        "seq",
        "slots",
        "steps",
        "url",
        "waiting",
        "zone",
    )

    def __init__(self, rid: int, zone: str, perf: Performance, created: float) -> None:
        self.id = rid
        self.url = f"sim://{zone}/{rid}"
        self.zone = zone
        self.perf = perf
        self.created = created
        self.ready_at = created + perf.cold_start_seconds
        self.draining = False
        self.in_flight = 0  # dispatched here and not finished: what the gateway counts
        self.running = 0  # sequences decoding
        self.steps = 0.0  # engine steps done (fractional: the fluid model)
        self.decoding: list[tuple[float, int, Request]] = []  # heap of (finish step, seq, req)
        self.seq = 0
        self.prefill: collections.deque[Request] = collections.deque()
        # prefill_mode "separate": (first token time, seq, request), each prompt on its own
        self.prefilling: list[tuple[float, int, Request]] = []
        self.separate = perf.prefill_mode == "separate"
        self.waiting: collections.deque[Request] = collections.deque()  # not admitted: no room
        self.kv_used = 0
        self.prefixes: collections.OrderedDict[int, None] = collections.OrderedDict()
        self.busy_prefill = 0.0  # seconds of step time spent on prefill tokens
        self.busy_decode = 0.0  # the rest of busy step time
        self.busy_window = 0.0  # busy seconds since the last utilisation reading
        self.clock = created  # the replica has run up to here
        self.slots = Slots(perf.max_loras, perf.adapter_load_seconds)
        self.lora = False  # has taken an adapter request: advance then watches for loads

    def accept(self, req: Request, now: float, first_token: Finish, finish: Finish) -> None:
        """A request dispatched here by the gateway at ``now``: catch up to then, take it."""
        if now > self.clock:
            self.advance(now, first_token, finish)
        req.replica = self
        self.in_flight += 1
        if req.adapter >= 0:
            self.lora = True
            req.adapter_hit = ADAPTER_HIT if self.slots.has(req.adapter, now) else ADAPTER_MISS
        self.waiting.append(req)
        self._admit(now)

    def _admit(self, now: float) -> None:
        perf = self.perf
        waiting = self.waiting
        skipped: list[Request] | None = None  # allocated only when an adapter request must wait
        while waiting:
            req = waiting[0]
            context = req.input + req.output
            if self.running + len(self.prefill) + len(self.prefilling) >= perf.max_num_seqs:
                break
            if self.kv_used + context > perf.kv_cache_tokens and self.running + len(self.prefill):
                break  # no KV room: it waits (vllm:num_requests_waiting)
            waiting.popleft()
            if req.adapter >= 0 and not self.slots.admit(req.adapter, now):
                if skipped is None:
                    skipped = []
                skipped.append(req)  # its adapter is loading or has no slot: later ones go on
                continue
            self.kv_used += context
            hit = req.prefix >= 0 and req.prefix in self.prefixes
            if hit:
                self.prefixes.move_to_end(req.prefix)
            elif req.prefix >= 0 and perf.prefix_cache_entries:
                self.prefixes[req.prefix] = None
                if len(self.prefixes) > perf.prefix_cache_entries:
                    self.prefixes.popitem(last=False)
            req.prefill_left = float(max(1, req.input - (req.prefix_tokens if hit else 0)))
            if self.separate:
                self.seq += 1
                done = now + req.prefill_left * perf.prefill_per_token_seconds
                heapq.heappush(self.prefilling, (done, self.seq, req))
            else:
                self.prefill.append(req)
        if skipped is not None:
            waiting.extendleft(reversed(skipped))

    def advance(self, until: float, first_token: Finish, finish: Finish) -> None:
        """Run the engine from its clock to ``until``, reporting first tokens and finishes."""
        if self.lora:
            self._advance_lora(until, first_token, finish)
        elif self.separate:
            self._advance_separate(until, first_token, finish)
        else:
            self._advance_chunked(until, first_token, finish)

    def _advance_lora(self, until: float, first_token: Finish, finish: Finish) -> None:
        """``advance`` for a replica serving adapters: in spans that end where a load does, so
        its waiters are admitted at once. A span is at most one load time long: a load started
        inside a span (when a finish frees a slot) then ends after it, at a span's end."""
        run = self._advance_separate if self.separate else self._advance_chunked
        slots = self.slots
        longest = slots.load_seconds or INF
        while self.clock < until:
            end = min(until, self.clock + longest)
            load_end = slots.next_load_end()
            if load_end is not None and load_end < end:
                end = load_end
            run(end, first_token, finish)
            if slots.loads_ended(self.clock) and self.waiting:
                self._admit(self.clock)

    def _advance_chunked(  # noqa: PLR0912, PLR0915 - the hot loop, kept whole: calls cost here
        self, until: float, first_token: Finish, finish: Finish
    ) -> None:
        """``advance`` for vLLM's chunked prefill. The hot loop of the simulator: locals
        instead of attributes, one event per iteration."""
        t = self.clock
        self.clock = until
        if until <= t or not self.in_flight:
            return
        perf = self.perf
        base = perf.step_base_seconds
        per_seq = perf.step_per_sequence_seconds
        per_tok = perf.prefill_per_token_seconds
        budget = perf.max_num_batched_tokens
        decoding, prefill = self.decoding, self.prefill
        running, steps = self.running, self.steps
        left = until - t
        busy = busy_prefill = 0.0
        while True:
            if prefill:
                chunk = budget - running if running < budget else 1
                step = base + per_seq * running + per_tok * chunk
                to_prefill = prefill[0].prefill_left / chunk
            elif running:
                chunk = 0
                step = base + per_seq * running
                to_prefill = INF
            else:
                break
            to_end = left / step
            to_decode = INF
            if decoding:
                to_decode = decoding[0][0] - steps
                to_decode = max(to_decode, 0.0)
            decode_next = to_decode <= to_prefill and to_decode <= to_end
            if decode_next:
                n = to_decode
            elif to_prefill <= to_end:
                n = to_prefill
            else:  # the tick ends mid-step
                steps += to_end
                busy += left
                if chunk:
                    busy_prefill += to_end * per_tok * chunk
                    prefill[0].prefill_left -= to_end * chunk
                break
            spent = n * step
            steps += n
            left -= spent
            busy += spent
            if chunk:
                busy_prefill += n * per_tok * chunk
                prefill[0].prefill_left -= n * chunk
            now = until - left
            if decode_next:
                req = heapq.heappop(decoding)[2]
                running -= 1
                self.running, self.steps = running, steps
                self._release(req)
                finish(req, now)
            else:
                running = self._prefilled(
                    prefill.popleft(), now, running, steps, first_token=first_token, finish=finish
                )
            if self.waiting:
                self.running, self.steps = running, steps
                self._admit(now)
        self.running, self.steps = running, steps
        self.busy_window += busy
        self.busy_prefill += busy_prefill
        self.busy_decode += busy - busy_prefill

    def _advance_separate(self, until: float, first_token: Finish, finish: Finish) -> None:
        """``advance`` for prefill beside decoding: a prompt's first token comes at its own
        time (admission plus its prefill), and a decode step takes base + per-sequence time
        whatever is prefilling."""
        now = self.clock
        self.clock = until
        if until <= now or not self.in_flight:
            return
        perf = self.perf
        base, per_seq = perf.step_base_seconds, perf.step_per_sequence_seconds
        decoding, prefilling = self.decoding, self.prefilling
        running, steps = self.running, self.steps
        busy = 0.0
        while running or prefilling:
            step = base + per_seq * running
            prefill_at = prefilling[0][0] if prefilling else INF
            decode_at = now + max(decoding[0][0] - steps, 0.0) * step if running else INF
            at = min(prefill_at, decode_at, until)
            if running:
                steps += (at - now) / step
            busy += at - now
            now = at
            if at >= until and decode_at > until and prefill_at > until:
                break
            if decode_at <= prefill_at:
                req = heapq.heappop(decoding)[2]
                running -= 1
                self.running, self.steps = running, steps
                self._release(req)
                finish(req, now)
            else:
                req = heapq.heappop(prefilling)[2]
                running = self._prefilled(
                    req, now, running, steps, first_token=first_token, finish=finish
                )
            if self.waiting:
                self.running, self.steps = running, steps
                self._admit(now)
        self.running, self.steps = running, steps
        self.busy_window += busy
        self.busy_decode += busy

    def _prefilled(
        self,
        req: Request,
        now: float,
        running: int,
        steps: float,
        *,
        first_token: Finish,
        finish: Finish,
    ) -> int:
        """``req`` finished prefilling at ``now``: its first token, then it decodes (or, with
        one output token, is done). Returns the running sequences after it."""
        first_token(req, now)
        if req.output <= 1:
            self.running, self.steps = running, steps
            self._release(req)
            finish(req, now)
            return running
        self.seq += 1
        heapq.heappush(self.decoding, (steps + req.output - 1, self.seq, req))
        return running + 1

    def _release(self, req: Request) -> None:
        self.kv_used -= req.input + req.output
        self.in_flight -= 1
        if req.adapter >= 0:
            self.slots.release(req.adapter)

    def evict_all(self) -> list[Request]:
        """The replica died: every request it held, for the gateway to retry or fail."""
        held = [r for _, _, r in self.decoding] + list(self.prefill) + list(self.waiting)
        held += [r for _, _, r in self.prefilling]
        self.decoding.clear()
        self.prefill.clear()
        self.prefilling.clear()
        self.waiting.clear()
        self.running = self.in_flight = self.kv_used = 0
        self.slots.clear()
        return held

    @property
    def idle(self) -> bool:
        return self.in_flight == 0

    def kv_usage(self) -> float:
        return self.kv_used / self.perf.kv_cache_tokens
