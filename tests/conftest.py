"""Settings every test tier shares."""

import os

import pytest
from hypothesis import settings

# Tests assert behaviour, never speed (benchmarks live in bench/): Hypothesis's default 200 ms
# per-example deadline only turns a loaded 2-core machine into failures.
settings.register_profile("tokenfleet", deadline=None)
settings.load_profile("tokenfleet")


def pytest_collection_finish(session: pytest.Session) -> None:
    """The real node is one per machine. When a running `make up` holds it, the tests that
    need it could only fail one by one after minutes: refuse at once, saying what to do."""
    needs = [
        item.nodeid
        for item in session.items
        if ("/e2e/" in f"/{item.nodeid}" or "test_real_node" in item.nodeid)
        # the examples' journeys against a running make up (TOKENFLEET_E2E_PLATFORM) share it
        and not (
            os.environ.get("TOKENFLEET_E2E_PLATFORM")
            and ("examples_on" in item.nodeid or "real_engine_on" in item.nodeid)
        )
    ]
    if not needs:
        return
    holder = realnode_holder()
    if holder is not None:
        pytest.exit(
            f"{len(needs)} selected tests need this machine's one real node, which a running "
            f"stack holds (pid {holder}, e.g. `make up`): run `make down` first, or deselect "
            "them (-m 'not …' / -k) to test beside it",
            returncode=3,
        )


def realnode_holder() -> int | None:
    """The pid holding the real node's lock, or None when it is free."""
    from tokenfleet.devstack.realnode_host import LOCK
    from tokenfleet.devstack.stack import lock_holder

    return lock_holder(LOCK)
