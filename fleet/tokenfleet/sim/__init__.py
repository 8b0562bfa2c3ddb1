"""The fleet simulator: replay token-level traffic against a simulated fleet faster than real time.

Gateways run the product's admission and routing cores, the operator's scaling and placement
cores decide replicas, and replicas follow a vLLM-like performance model (``replica``).
"""

from tokenfleet import native

# The compiled build of these modules, when one matches their source (import machinery only:
# the modules themselves stay pure). See tokenfleet.native.
__path__[:0] = native.search_path(__name__)
