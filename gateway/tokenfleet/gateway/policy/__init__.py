"""Pure decisions of the gateway: request validation, admission, quotas, routing, deadlines.

Values in, typed results with reasons out: no I/O, no clocks (``now`` is a parameter), no
randomness (a seeded ``random.Random`` is passed in where needed), no logging.
"""

from tokenfleet import native

# The compiled build of these modules, when one matches their source (import machinery only:
# the modules themselves stay pure). See tokenfleet.native.
__path__[:0] = native.search_path(__name__)
