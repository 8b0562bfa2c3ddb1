"""Fit the replica performance model to a measured capacity profile (``tokenfleet bench replica``).

At each measured load level a replica ran ``b = decode tokens/s x inter-token time`` sequences
at once (each yields one token per step) and prefilled ``prefill tokens/s x step`` tokens per
step. The step model ``step = base + per_sequence x b + per_token x prefill`` is linear in its
three coefficients, so least squares over the levels fits them. The profile stores p99
inter-token times, so the fit is slightly pessimistic: the simulated replica is no faster than
the measured one.
"""

from __future__ import annotations

import numpy as np

from tokenfleet.capacity.planning import Profile
from tokenfleet.sim.scenario import Performance


class CalibrationError(ValueError):
    """The profile cannot determine the model."""


def calibrate(profile: Profile, base: Performance) -> Performance:
    """``base`` with its step coefficients and sequence limit taken from ``profile``."""
    points = [p for p in profile.points if p.inter_token_p99_seconds > 0 and p.throughput_rps > 0]
    if len(points) < 3:
        raise CalibrationError(
            f"the profile of {profile.model} has {len(points)} usable load levels; measure at "
            "least 3 (tokenfleet bench replica --rates ...)"
        )
    step = np.array([p.inter_token_p99_seconds for p in points])
    running = np.array([p.decode_tokens_per_second for p in points]) * step
    prefill = np.array([p.prefill_tokens_per_second for p in points]) * step
    design = np.column_stack([np.ones_like(step), running, prefill])
    coef, *_ = np.linalg.lstsq(design, step, rcond=None)
    step_base, per_sequence, per_token = (max(float(c), 0.0) for c in coef)
    if step_base <= 0:
        step_base = float(step.min())  # all load-dependent: keep the fastest step seen
    return base.model_copy(
        update={
            "step_base_seconds": step_base,
            "step_per_sequence_seconds": per_sequence,
            "prefill_per_token_seconds": per_token,
            "max_num_seqs": profile.max_num_seqs,
        }
    )
