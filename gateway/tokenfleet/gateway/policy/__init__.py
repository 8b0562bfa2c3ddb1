"""Pure decisions of the gateway: request validation, admission, quotas, routing, deadlines.

Values in, typed results with reasons out: no I/O, no clocks (``now`` is a parameter), no
randomness (a seeded ``random.Random`` is passed in where needed), no logging.
"""
