"""``python -m tokenfleet.worker [verify | vllm serve args...]``: the worker image's entrypoint."""

from __future__ import annotations

import os
import sys

from tokenfleet.worker import entrypoint

if __name__ == "__main__":
    sys.exit(entrypoint.main(sys.argv[1:], env=dict(os.environ)))
