"""One reconciler per kind, kubebuilder's way: each gathers what it needs from the indexes (and
Prometheus or the API server), hands it to its pure planner (``tokenfleet.operator.plan``), acts
on the difference and reports status and events. The loop (``tokenfleet.operator.loop``) only
sequences them, pass after pass.

Floors inside (import-linter): the kinds' reconcilers stand alone over the shared machinery —
what the indexes hold (:mod:`indexed`), the pools and their claimants (:mod:`pool_claims`), one
object's guarded pass (:mod:`guard`) and the status writer (:mod:`status_writer`).
"""
