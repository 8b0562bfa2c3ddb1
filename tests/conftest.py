"""Settings every test tier shares."""

from hypothesis import settings

# Tests assert behaviour, never speed (benchmarks live in bench/): Hypothesis's default 200 ms
# per-example deadline only turns a loaded 2-core machine into failures.
settings.register_profile("tokenfleet", deadline=None)
settings.load_profile("tokenfleet")
