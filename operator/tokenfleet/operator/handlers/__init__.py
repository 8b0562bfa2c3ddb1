"""kopf handlers: indexes of actual state, wake-ups, and the one reconcile loop.

Importing this package registers them with kopf. No handler here makes kopf add finalizers
(no daemons, timers or deletion handlers), so objects and namespaces delete cleanly even while
the operator is down; children go with their owners by garbage collection.
"""

from tokenfleet.operator.handlers import indexes, lifecycle, wakeups

__all__ = ["indexes", "lifecycle", "wakeups"]
