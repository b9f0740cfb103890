"""The tape regions of one Terra: each recording tape's copy (``tape.TapeTee``), and at
``gradient`` a hit, a guard miss or a formation.

A call site forms its G after two calls with equal recordings (ops, attrs, wiring, argument
specs, variable handles, the variables watched and the sources), and only if G's gradients equal
the tape's own bit for bit on the second call. Anything the copy cannot see makes the call run
TensorFlow's gradient as always: a custom gradient or a tf.function on the tape, ``tape.watch``,
a persistent tape, another tape recording the gradient, output gradients,
``unconnected_gradients=ZERO``, sources that are not variables.
"""

from __future__ import annotations

import time

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import backprop, record
from tensorflow.python.framework.indexed_slices import IndexedSlices
from tensorflow.python.ops.unconnected_gradients import UnconnectedGradients

from .. import capture
from ..capture import hooks
from ..capture.location import user_line
from ..trace.tracegraph import RegionCall
from .region import _gradient as region_gradient
from .summary import RegionRow
from .tape import REGION_OP, TapeRecording, TapeRegion, TapeTee
from .tape_key import CopyKey, CopyValues, arg_sources

_TEE = "_terra_tape_tee"  # a tape's copy, in the tape's __dict__ (it dies with the tape)
MAX_TABLE = 64  # G functions per Terra: beyond, a recording that changes every call
MAX_PENDING = 256
MAX_MATCHED = 256  # copy keys answered without wiring
FORM_AFTER = 3  # calls with one recording before its G forms: worth a compile and a new op
QUICK_FORMS = 4  # Gs a call site with a G forms at a recording's first call (new specs)
NAME = "GradientTape.gradient"


class Tapes:
    """Tape regions by key, for ``regions`` (a tape's row is listed with its rows)."""

    def __init__(self, regions) -> None:
        self.regions, self.rows = regions, regions.rows
        self.table: dict[tuple, TapeRegion] = {}
        self.pending: dict[tuple, int] = {}  # key -> calls with it so far (G not formed)
        self.active: list[TapeTee] = []
        self.enabled = False  # Terra(regions="tapes"): experimental, off by default
        self.quick: dict[str, int] = {}  # call site -> Gs formed at a first call
        self.calls: dict[str, RegionCall] = {}
        self.matched: dict[tuple, tuple] = {}  # copy key -> (G, where its arguments are)

    # -- while tapes record -----------------------------------------------------------------

    def push(self, tape, original) -> None:
        original(tape)
        sink = hooks.current_sink()
        if tape._persistent or sink is None:
            return
        tee = tape.__dict__.get(_TEE)
        if tee is None:  # pushed again after ``stop_recording``: the same copy goes on
            tee = tape.__dict__[_TEE] = TapeTee(sink)
        tee.inner = sink
        hooks.replace_sink(tee)
        self.active.append(tee)

    def pop(self, tape, original) -> None:
        original(tape)
        tee = tape.__dict__.get(_TEE)
        if tee is not None and tee in self.active:
            self._stop(tee)

    def _stop(self, tee: TapeTee) -> None:
        self.active.remove(tee)
        if hooks.current_sink() is tee:
            hooks.replace_sink(tee.inner)
        else:  # a sink put in place after it is still in front: it stays in the chain
            tee.broken = "the tape stopped recording inside a framework call"

    def end_iteration(self) -> None:
        for tee in reversed(self.active):
            tee.broken = "the tape recorded across iterations"
            self._stop(tee)

    def watched(self, tape, original, *args, **kwargs):
        """``watch`` or ``reset``: the copy no longer knows what the tape holds."""
        tee = tape.__dict__.get(_TEE)
        if tee is not None:
            tee.broken = "tape.watch or tape.reset"
        return original(tape, *args, **kwargs)

    def on_record(self, op_type: str, outputs, inputs, backward) -> None:
        """An op recorded with its own gradient function: a region's hit is copied, anything
        else (a custom gradient, a tf.function) makes the copies unusable."""
        for tee in self.active:
            if op_type == REGION_OP and getattr(backward, "func", None) is region_gradient:
                tee.region_op(inputs, outputs, *backward.args)
            else:
                tee.broken = f"an op with its own gradient function on the tape ({op_type})"

    # -- gradient -----------------------------------------------------------------------------

    def gradient(self, tape, original, target, sources, output_gradients=None,
                 unconnected_gradients=UnconnectedGradients.NONE):
        start = time.perf_counter()
        plain = output_gradients is None and unconnected_gradients == UnconnectedGradients.NONE
        region, values, row, new = self._plan(tape, target, sources, plain)
        theirs = None
        if region is None or new is not None:  # one call site: the tape's gradient ops keep
            theirs = original(tape, target, sources, output_gradients, unconnected_gradients)
        if region is None:
            return theirs
        grads = region.run(values)  # one call site too, for G's op
        if new is not None:  # a new G: formed if its gradients are the tape's
            return self._check(new, region, row, grads, theirs)
        row.hits += 1
        self.regions.marks.append((NAME, start, time.perf_counter()))
        tape._watched_variables, tape._tape = tape._tape.watched_variables(), None
        return type(sources)(grads)

    def _plan(self, tape, target, sources, plain: bool) -> tuple:
        """(G, the values it reads, the call site's row, what forming it needs) for this call:
        a formed G (the last None), a new one to check, or None (TensorFlow's gradient alone)."""
        tee = tape.__dict__.pop(_TEE, None)
        none = (None,) * 4
        if tee is None or tee.broken or tape._tape is None or not plain \
                or type(sources) not in (list, tuple) or not isinstance(target, tf.Tensor):
            return none
        handles = [backprop._handle_or_self(s) for s in sources]
        if not all(isinstance(h, tf.Tensor) and h.dtype == tf.resource for h in handles):
            return none
        row = self._row()
        if row.state == "refused":
            return none
        if tape._recording:
            tape._pop_tape()
        if record.could_possibly_record():  # another tape would record G's ops: higher order
            return none
        watched = frozenset(v.handle._id for v in tape.watched_variables())
        try:
            copy = CopyKey(tee, target, watched, handles)
            matched = self.matched.get(copy.key)
            if matched is not None:  # the guard: no wiring
                return matched[0], CopyValues(copy, matched[1]), row, None
            rec = TapeRecording(tee, target, watched)
        except Exception:  # noqa: BLE001 - an op the copy cannot wire: TensorFlow's gradient
            return none
        src = rec.source_keys(handles)
        key = (rec.key(), tuple(sorted(rec.saved_wires.items())), tuple(sorted(rec.trainable)),
               src)
        region = self.table.get(key)
        if region is not None:  # formed, for another copy key (other outside values shared)
            self._match(copy, rec, region)
            return region, rec, row, None
        if row.state == "formed":
            row.misses += 1  # other ops or specs than those of its G functions
        region = self._new(key, rec, src, row)
        return region, rec, row, (key, copy, rec)

    def _match(self, copy: CopyKey, rec: TapeRecording, region: TapeRegion) -> None:
        """Answer copies with ``copy``'s key by ``region`` without wiring them."""
        sources = arg_sources(copy, rec.externals, rec.numpy_args)
        if sources is not None:
            if len(self.matched) >= MAX_MATCHED:
                self.matched.clear()
            self.matched[copy.key] = (region, sources)

    def _row(self) -> RegionRow:
        site, call = user_line()
        row = self.rows.get(("tape", site))
        if row is None:
            row = self.rows[("tape", site)] = RegionRow(NAME, site, call)
        return row

    def _new(self, key: tuple, rec: TapeRecording, src: tuple, row: RegionRow):
        """G for a recording seen ``FORM_AFTER`` times, or at once where G formed for other
        specs (a new batch size: its first call is checked against the tape anyway); None
        otherwise."""
        seen = self.pending.get(key, 0) + 1
        quick = row.state == "formed" and self.quick.get(row.source, 0) < QUICK_FORMS
        ready = (seen >= FORM_AFTER or quick) and len(self.table) < MAX_TABLE
        if ready and not rec.created_vars:
            self.quick[row.source] = self.quick.get(row.source, 0) + (seen < FORM_AFTER)
            try:
                with capture.bypass():
                    return TapeRegion(rec, src, "tape_gradient")
            except Exception as error:  # noqa: BLE001 - e.g. an op without a gradient function
                row.refuse(f"cannot build the gradient function: {error}")
                return None
        if len(self.pending) >= MAX_PENDING:
            self.pending.clear()
        self.pending[key] = seen
        row.note("traced")
        return None

    def _check(self, new: tuple, region: TapeRegion, row: RegionRow, mine: list, theirs):
        """Form G if its gradients equal the tape's bit for bit. G's are returned then: its op
        is in this iteration's trace (one run for real, ``_new``), so its next call is known.
        ``new``: G's key, the copy's key and its wiring."""
        key, copy, rec = new
        with capture.bypass(), capture.quiet_reads():  # terra-nb's check: no program read
            same = all(_same(a, b) for a, b in zip(mine, theirs))
        if not same:
            row.refuse("its compiled gradient differs from the tape's (a gradient the copy "
                       "cannot see)")
            return theirs
        self.table[key] = region
        self._match(copy, rec, region)
        row.form(region.n_ops)
        fn = region.fn
        self.calls[fn.name] = RegionCall(fn.name, NAME, "backward", row.source, row.call,
                                         fn.op_types())
        return type(theirs)(mine)


def _same(a, b) -> bool:
    """Bit for bit: both None, or equal values (an IndexedSlices: its values and indices)."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, IndexedSlices) or isinstance(b, IndexedSlices):
        return type(a) is type(b) and _same(a.values, b.values) and _same(a.indices, b.indices)
    x, y = np.asarray(a), np.asarray(b)
    return x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes()

