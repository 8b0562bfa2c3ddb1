"""The adapter-loader's state and its load/unload recipes (the sidecar's shell, minus HTTP).

One load per adapter name at a time: a second load of the same name with the same request
while the first runs waits for it and gets its answer; any other call for that name waits its
turn; different names proceed in parallel (each in its own HTTP thread). Every load is
fetch → verify → decide (adapter_plan) → engine calls → answer, logged in one line.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from tokenfleet.worker import adapter_files, adapter_plan, engine_lora
from tokenfleet.worker.adapter_plan import Answer, LoadRequest, UnloadRequest

log = logging.getLogger("tokenfleet.worker.adapters")


@dataclasses.dataclass(frozen=True, slots=True)
class _Flight:
    request: LoadRequest
    answer: concurrent.futures.Future[Answer]


class Loads:
    """What this sidecar has loaded, and the one-at-a-time-per-name discipline."""

    def __init__(
        self,
        *,
        files: adapter_files.AdapterFiles,
        engine: engine_lora.Engine,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._files = files
        self._engine = engine
        self._clock = clock
        self._guard = threading.Lock()  # guards the three dicts, never held across I/O
        self._names: dict[str, threading.Lock] = {}
        self._flights: dict[str, _Flight] = {}
        self._loaded: dict[str, adapter_plan.Loaded] = {}

    def listing(self) -> Answer:
        with self._guard:
            adapters = [a.to_wire() for a in sorted(self._loaded.values(), key=lambda a: a.name)]
        return Answer(status=200, body={"adapters": adapters})

    def load(self, request: LoadRequest) -> Answer:
        """Join an identical load in flight, else run this one after any other for the name."""
        with self._guard:
            flight = self._flights.get(request.name)
            lock = self._names.setdefault(request.name, threading.Lock())
        if flight is not None and flight.request == request:
            return flight.answer.result()
        with lock:
            flight = _Flight(request, concurrent.futures.Future())
            with self._guard:
                self._flights[request.name] = flight
            try:
                answer = self._load(request)
                flight.answer.set_result(answer)
                return answer
            except BaseException as error:
                flight.answer.set_exception(error)
                raise
            finally:
                with self._guard:
                    if self._flights.get(request.name) is flight:
                        del self._flights[request.name]

    def unload(self, request: UnloadRequest) -> Answer:
        with self._guard:
            lock = self._names.setdefault(request.name, threading.Lock())
        with lock:
            started = time.monotonic()
            with self._guard:
                loaded = self._loaded.get(request.name)
            if loaded is None:
                return adapter_plan.error_answer("NotLoaded", f"{request.name!r} is not loaded")
            try:
                if request.name in self._engine.names():  # a restarted engine forgot it already
                    self._engine.unload(request.name)
            except engine_lora.EngineError as error:
                return adapter_plan.error_answer("EngineError", str(error))
            with self._guard:
                self._loaded.pop(request.name, None)
            log.info(
                "unloaded adapter %s digest=%s in %.2f s",
                request.name,
                loaded.digest,
                time.monotonic() - started,
            )
            return Answer(status=200, body={"name": request.name})

    def _load(self, request: LoadRequest) -> Answer:
        """fetch → verify → decide → engine → answer; the caller holds the name's lock."""
        started = time.monotonic()
        checked = self._files.check(request)
        with self._guard:
            before = self._loaded.get(request.name)
        try:
            asks = adapter_plan.asks_engine(request=request, verdict=checked.verdict, loaded=before)
            plan = adapter_plan.decide(
                request=request,
                verdict=checked.verdict,
                loaded=before,
                engine_lists=asks and request.name in self._engine.names(),
            )
            self._act(request, plan, checked)
        except engine_lora.EngineError as error:
            log.warning("adapter %s digest=%s: engine: %s", request.name, request.digest, error)
            return adapter_plan.error_answer("EngineError", str(error))
        log.info(
            "adapter %s digest=%s %s (%s%s) in %.2f s",
            request.name,
            request.digest,
            plan.why,
            checked.verdict.reason,
            ", downloaded" if checked.downloaded else "",
            time.monotonic() - started,
        )
        return adapter_plan.load_answer(request=request, verdict=checked.verdict, why=plan.why)

    def _act(
        self, request: LoadRequest, plan: adapter_plan.Plan, checked: adapter_files.Checked
    ) -> None:
        """The plan's engine calls, in order, with the sidecar's record kept in step."""
        if plan.unload_first:
            self._engine.unload(request.name)
        if plan.forget:
            with self._guard:
                self._loaded.pop(request.name, None)
        if plan.load and checked.path is not None:
            self._engine.load(request.name, checked.path)
            loaded = adapter_plan.Loaded(
                name=request.name, digest=request.digest, path=checked.path, loaded_at=self._clock()
            )
            with self._guard:
                self._loaded[request.name] = loaded
