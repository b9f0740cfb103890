"""What a failed segment run leaves readable: eager has the values of the ops before the failing
one, a compiled run gives none of its values when one of its ops fails.

A run issued op by op made them already: the values its ops before the failing one made are
real (those after it are poisoned), and they are what eager made, that op's own partial writes
included. They are taken as they are (``env``): nothing runs again.

For a compiled run, the ops before the segment's first op with side effects run again, op by op. A
compiled segment runs that op only once every op before it succeeded (lower.py orders it after
them), so when one of them failed the run changed no state, and running them again fails at the same
op: the values they made before it go into their placeholders once Python has been told of the
failure (a read before then raises the failure, as it would have). When none of them fails again,
the failing op came later, after writes the failed run may have applied in part: running anything
again could apply them twice, so no value is made readable (each read raises the failure).
"""

from __future__ import annotations

from typing import Any

from .effect_order import has_side_effect
from .lower import Segment, interpretable, real_argument, run_segment


def values_before_failure(segment: Segment, args: list, handles: dict[int, Any],
                          returns: list, env: list | None = None) -> list[tuple]:
    """(placeholder, value) for each of ``returns`` (the placeholders of ``segment.returns``, in
    order) that an op before the failing one made; ``args``: the failed run's arguments;
    ``env``: its ops' outputs, if it ran op by op (``run_segment``)."""
    if env:
        return _made_values(returns, segment, env)
    ops = segment.ops
    first_effect = next((p for p, op in enumerate(ops) if has_side_effect(op.op_type)), len(ops))
    prefix = Segment(ops[:first_effect], segment.args, ())
    if not interpretable(prefix):
        return []
    ran: list[list] = []
    try:
        args = [real_argument(a, dtype) for a, (dtype, _) in zip(args, segment.args)]
        run_segment(prefix, args, handles, env=ran)
    except Exception:  # the failure Python is told of is the failed run's
        return _made_values(returns, segment, ran)
    return []


def _made_values(returns: list, segment: Segment, env: list[list]) -> list[tuple]:
    """The placeholders among ``returns`` whose value the run's ops (their outputs: ``env``)
    made, with the shape traced."""
    return [(ph, env[p][k]) for ph, (p, k) in zip(returns, segment.returns)
            if p < len(env) and k < len(env[p]) and made_shape(env[p][k]) == ph.sig[1]]


def made_shape(value) -> tuple | None:
    """The shape of ``value`` (an op's output, from the executor); None if it was never made
    (poisoned by a failure before it, or dropped)."""
    try:
        return value._shape_tuple()
    except Exception:  # noqa: BLE001 - poisoned: dropped or failed
        return None
