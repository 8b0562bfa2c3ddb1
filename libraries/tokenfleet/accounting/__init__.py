"""Pure rules every part that counts a tenant's use must agree on: what a budget decides
(:mod:`.budget`), what a pool's GPU-hours cost each tenant (:mod:`.cost`), and the usage
ledger's layout in Redis (:mod:`.usage_layout`).

Shared by both runtimes (the gateway enforces and records, the operator reports) and the
command-line tools (``tokenfleet usage``), so it sits on its own floor under them and over the
API contract (``tokenfleet.api``), whose types it gives meaning to. No I/O, clocks, randomness
or logging.
"""
