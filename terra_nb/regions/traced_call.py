"""One run of a call's Python on its way to a region (``TracedCall``), and what its recorded
ops may not hold (``unsound_ops``): formation's half of ``table.Regions``.

The run is recorded (a tee into the engine's sink), its effects probed (``effects``), and every
callee watched (``callee_watch``); ``finish`` forms the region from two alike runs, keeps the
recording for a later one, or refuses the call, saying why.
"""

from __future__ import annotations

import contextlib

from .. import capture
from ..capture import hooks
from .callee_watch import CalleeWatch
from .effects import EffectProbe, hidden_inputs, objects_of, side_outputs
from .families import family_key
from .python_state import argument_objects
from .recorded_ops import kernel_state_ops, value_shaped_ops
from .recording import Recording, RecordingTee
from .summary import RegionRow

UNLIKE_RUNS = 16  # traced runs matching no earlier one before the call is refused for good


def unsound_ops(rec: Recording) -> str | None:
    """Why ``rec``'s ops cannot be a region (``recorded_ops``), or None; a region of
    value-shaped ops that Python did not read gets no backward (``rec.no_backward``)."""
    kept = kernel_state_ops(rec)
    if kept:
        return (f"runs {kept[0]}, which keeps state in its kernel (a random op with an op seed, "
                f"tf.print): a region's function would start it again")
    shaped = value_shaped_ops(rec)
    read = sorted(set(shaped) & rec.shapes_read)
    if read:
        return (f"Python read the output shape of {rec.ops[read[0]].op_type}, which depends on "
                f"values (boolean_mask, unique, a computed reshape): it would be baked in")
    if shaped and rec.no_backward is None:
        rec.no_backward = (f"its backward would fix the value-dependent output shape of "
                           f"{rec.ops[shaped[0]].op_type}")
    return None


class TracedCall:
    """One run of a call's Python on its way to a region: its ops are recorded (a tee into the
    engine's sink) and its effects probed; ``finish`` forms the region, keeps the recording or
    refuses the call."""

    def __init__(self, regions, key: tuple, row: RegionRow, obj, tensors: list,
                 args: tuple) -> None:
        regions.changed = True
        regions.forming.setdefault(row.name, "traced on its way to a region")
        self.regions, self.key, self.row, self.obj = regions, key, row, obj
        self.tensors, self.args = tensors, args
        self.objs = objects_of(obj, key[1])
        self.arguments = argument_objects(args)  # probed, then guarded by the region
        self.epoch = regions.epoch
        self.tee = RecordingTee(hooks.current_sink())
        self._hold = contextlib.ExitStack()

    def __enter__(self) -> None:
        self.probe = self._hold.enter_context(EffectProbe(self.objs, self.arguments))
        self._hold.enter_context(capture.capturing(self.tee))
        self.callees = self._hold.enter_context(CalleeWatch())  # innermost: the call alone

    def __exit__(self, *exc) -> None:
        self._hold.close()

    def finish(self, result) -> None:
        regions, row, key = self.regions, self.row, self.key
        rec = Recording(self.tee, self.tensors, result)
        rec.no_backward = self.callees.own_gradient
        rec.shapes_read = rec.positions_of(self.callees.shape_reads)
        effects = self.probe.effects + side_outputs(self.obj, result) + hidden_inputs(self.objs)
        effects += self.callees.finish(result)
        if rec.outside - self.probe.tensor_ids():
            effects.append(f"reads {len(rec.outside - self.probe.tensor_ids())} tensor(s) made "
                           f"before the call that it is not given (a Keras mask, the weights "
                           f"of a stateless_call): their values would be baked in")
        effects += [f"value read ({rec.reads} tensors)"] * bool(rec.reads)
        if rec.created_vars or regions.epoch != self.epoch:
            effects.append("variable created")
        earlier = regions.pending.pop(key, [])
        same = [r for r in earlier if r.key() == rec.key()]
        if effects:
            row.refuse("; ".join(effects))
        elif same or regions.families.shared(family_key(self.obj, key[1], rec)):
            # a call of a family with a shared F needs no second run: its ops are the family's
            regions.form(key, row, self.obj, rec, self.objs, self.args, self.arguments)
            regions.keep_pending(key, [r for r in earlier if r not in same])  # other ways
        elif row.unlike >= UNLIKE_RUNS:  # a schedule settles sooner; an input baked in never
            regions._refuse_for_good(row, f"its runs record other ops or constants each time "
                                          f"({row.unlike + 1} runs, none alike two times: a "
                                          f"value computed in Python, an input baked in)")
        else:
            regions.keep_pending(key, earlier + [rec])
            row.unlike += 1
            row.note("traced")
