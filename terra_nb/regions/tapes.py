"""The tape regions of one Terra: each recording tape's copy (``tape.TapeTee``), and at
``gradient`` a hit, a guard miss or a formation.

A recording (its ops, attrs, wiring, argument specs, variable handles, the variables watched and
the sources) forms its G once that pays, by the rule of the compile policy (``coexec/rental.py``):
the Python its gradients cost, run by the tape, against G's formation. G's gradients must equal
the tape's own bit for bit on its first call. A call where a region was traced or formed records
what the next call will not (the call's ops, not the region): it neither forms nor pays.

A copy's wiring costs Python (~2 ms a step for rnn-varlen's 21 ops). So where the loop's length
is known and a recording's G is not due once its paid calls set its rent (``Rental.rent_known``),
it never will be in this loop: its copies are passed to TensorFlow unwired, a call site without a
G is declined, and once every call site is, tapes are not copied until the next loop, unless the
regions need them (``EagerOrder.copies_needed``). So is a call site whose tape held what the copy
cannot see (below) in ``UNSEEN_AFTER`` calls in a row.

G's first call is an op co-execution has not seen: in a co-executed iteration it would be a
fallback (the rest of the iteration traced, and counted: a notebook's fallbacks depended on the
machine's speed). So a G due there forms in the next iteration, which runs for real for it (as
one where a Keras region formed does), and the ones after it too until G's call comes (it may
skip iterations: a loop over a few lengths); if that one co-executes all the same (the loop's
iterations run for real while regions form are used up), G forms at its next call.

Anything G cannot answer makes the call run TensorFlow's gradient as always: a custom gradient
or a tf.function on the tape, ``tape.watch``, a persistent tape, another tape recording the
gradient, output gradients, ``unconnected_gradients=ZERO``, sources that are not variables; but
where TensorFlow's tape would sum a gradient in another order than eager's (a region's hit on
it), the gradients are summed over the opened copy first (``eager_order.py``).
"""

from __future__ import annotations

import time

import tensorflow as tf
from tensorflow.python.eager import backprop, record
from tensorflow.python.ops.unconnected_gradients import UnconnectedGradients

from .. import capture
from ..capture import hooks
from ..capture.location import user_line
from ..capture.placeholder import Placeholder
from ..coexec.compile_policy import ops_to_compile
from ..coexec.rental import Rental
from ..trace.tracegraph import RegionCall
from .eager_order import EagerOrder
from .region import _gradient as region_gradient
from .summary import RegionRow
from .tape import REGION_OP, TapeRecording, TapeRegion, TapeTee, same_bits
from .tape_key import CopyKey, CopyValues, arg_sources

_TEE = "_terra_tape_tee"  # a tape's copy, in the tape's __dict__ (it dies with the tape)
MAX_TABLE = 64  # G functions per Terra: beyond, a recording that changes every call
MAX_PENDING = 256
MAX_MATCHED = 256  # copy keys answered without wiring
# G's trace and first run: ~15 ms, and ~0.5 ms per op instantiated (measured: mlp 25 ops 20-24
# ms, cnn 66 ops 67 ms, rnn 95-151 ops 63-106 ms), scaled by what this Terra measures ...
FORM_BASE_S, FORM_PER_OP_S = 0.015, 0.0005
FALLBACK_FACTOR = 2.0  # ... and as much again: its new op makes the next co-executed run fall back
HIT_S = 0.0004  # a G's call, before this Terra measures its own
UNSEEN_AFTER = 3  # calls in a row the copy cannot see, after which a call site is declined
NAME = "GradientTape.gradient"
OPENED = ("traced: summed in eager's order over the regions' own ops (a region's hit on the "
          "tape would sum a gradient of three or more terms in another)")


class Tapes:
    """Tape regions by key, for ``regions`` (a tape's row is listed with its rows)."""

    def __init__(self, regions) -> None:
        self.regions, self.rows = regions, regions.rows
        self.table: dict[tuple, TapeRegion] = {}
        self.pending: dict[tuple, Rental] = {}  # key -> its calls' rent (G not formed)
        self.iteration = 0  # the Terra iteration running now ...
        self.horizon: int | None = None  # ... and the one the loop ends before (None: unknown)
        self.scale = 1.0  # G's measured formation / its estimate
        self.hit_s = HIT_S  # a G's call, as measured
        self.declined: set[str] = set()  # call sites whose G would not pay in this loop ...
        self.resting = False  # ... all of them: tapes are not copied
        self.active: list[TapeTee] = []
        self.forms = False  # G formed (with regions, except Terra(regions="calls"))
        self.calls: dict[str, RegionCall] = {}
        self.matched: dict[tuple, tuple] = {}  # copy key -> (G, where its arguments are) ...
        self.passed: set[tuple] = set()  # ... or declined: TensorFlow's gradient, not wired
        self.unseen: dict[str, int] = {}  # call site -> its calls the copy could not see
        # tapes TensorFlow would sum in another order than eager's (``eager_order``), and the
        # call sites where one was (their tapes stay copied)
        self.eager = EagerOrder(self, _estimate)
        self.opened: set[str] = set()

    def expect_end(self, iteration: int | None) -> None:
        """The loop ends before ``iteration`` (None: not known). A new loop's length may repay
        what the last one's did not: declined recordings and call sites are tried again."""
        self.horizon = iteration
        if iteration is not None:
            self.declined.clear()
            self.unseen.clear()
            self.passed.clear()
            self.resting = False

    # -- while tapes record -----------------------------------------------------------------

    def push(self, tape, original) -> None:
        original(tape)
        sink = hooks.current_sink()
        if tape._persistent or sink is None or self.resting and not self.eager.copies_needed():
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
        """``watch``: the copy keeps what was watched (for eager's order: G cannot see it);
        ``reset``: the copy no longer knows what the tape holds."""
        tee = tape.__dict__.get(_TEE)
        if tee is not None and original.__name__ == "watch":
            tee.watch(tf.nest.flatten(args[0] if args else kwargs.get("tensor")))
        elif tee is not None:
            tee.broken = "tape.reset"
        return original(tape, *args, **kwargs)

    def on_record(self, op_type: str, outputs, inputs, backward) -> None:
        """An op recorded with its own gradient function: a region's hit is copied, anything
        else (a custom gradient, a tf.function) makes the copies unusable."""
        for tee in self.active:
            if op_type == REGION_OP and getattr(backward, "func", None) is region_gradient:
                tee.region_op(inputs, outputs, *backward.args)
                self.eager.hit_taped = True
            else:
                tee.own_gradient(op_type, inputs, outputs)

    # -- gradient -----------------------------------------------------------------------------

    def gradient(self, tape, original, target, sources, output_gradients=None,
                 unconnected_gradients=UnconnectedGradients.NONE):
        start = time.perf_counter()
        plain = output_gradients is None and unconnected_gradients == UnconnectedGradients.NONE
        opened = self._eager_order(tape, target, sources, output_gradients,
                                   unconnected_gradients == UnconnectedGradients.ZERO)
        if opened is not None:
            return opened
        if not self.forms:
            tape.__dict__.pop(_TEE, None)
            return original(tape, target, sources, output_gradients, unconnected_gradients)
        region, values, row, new = self._plan(tape, target, sources, plain)
        theirs = None
        if region is None or new is not None:  # one call site: the tape's gradient ops keep
            theirs = original(tape, target, sources, output_gradients, unconnected_gradients)
        if region is None:
            if isinstance(values, Rental):  # G not formed yet: it would have saved this much
                values.paid(max(0.0, time.perf_counter() - start - self.hit_s))
            return theirs
        ran = time.perf_counter()
        grads = region.run(values)  # one call site too, for G's op
        if new is not None:  # a new G: formed if its gradients are the tape's
            return self._check(new, region, row, grads, theirs, time.perf_counter() - ran)
        row.hits += 1
        end = time.perf_counter()
        self.hit_s += (end - start - self.hit_s) / 8  # recent hits weigh most
        self.regions.marks.append((NAME, start, end))
        tape._watched_variables, tape._tape = tape._tape.watched_variables(), None
        return type(sources)(grads)

    def _plan(self, tape, target, sources, plain: bool) -> tuple:
        """(G, the values it reads, the call site's row, what forming it needs) for this call:
        a formed G (the last None), a new one to check, or None (TensorFlow's gradient alone;
        then the recording's rent account for the call to pay, if it has one, or None)."""
        tee = tape.__dict__.pop(_TEE, None)
        none = (None,) * 4
        if tee is not None and (tee.broken or tee.watches):
            if not self.regions.changed:  # (a Keras call traced: its ops recur no more)
                self._unseen(tee.broken or "tape.watch")
            return none
        # a region traced or formed: not the next call's ops
        handles = None if tee is None or self.regions.changed else _handles(
            tape, target, sources, plain)
        if handles is None:
            return none
        row = self._row()
        if row.state == "refused" or row.source in self.declined:
            return none
        self.unseen.pop(row.source, None)  # seen: the calls unseen must come in a row
        if tape._recording:
            tape._pop_tape()
        if record.could_possibly_record():  # another tape would record G's ops: higher order
            return none
        watched = frozenset(v.handle._id for v in tape.watched_variables())
        try:
            copy = tee.copy or CopyKey(tee, target, watched, handles)
            matched = self.matched.get(copy.key)
            if matched is not None:  # the guard: no wiring
                return matched[0], CopyValues(copy, matched[1]), row, None
            if copy.key in self.passed:
                return none
            rec = tee.wired or TapeRecording(tee, target, watched)
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
        return self._rent(key, copy, rec, src, row, type(target) is Placeholder)

    def _eager_order(self, tape, target, sources, output_gradients, zeros: bool):
        """The gradients computed over the opened copy (``eager_order``) where TensorFlow's
        tape, holding a region's hit, would sum some in another order than eager's; None where
        its order is eager's (or the copy cannot tell: it cannot see the whole tape)."""
        tee = tape.__dict__.get(_TEE)
        if tee is None or tape._tape is None or not self.eager.followed(tee, target):
            return None
        if tape._recording:
            tape._pop_tape()
        if record.could_possibly_record():  # another tape records the gradient: higher order
            return None
        watched = frozenset(v.handle._id for v in tape.watched_variables())
        answer = self.eager.gradients(tee, target, sources, watched, output_gradients, zeros)
        if answer is None:
            return None
        grads, region, new = answer
        row = self._row()
        self.opened.add(row.source)  # never declined: its tapes must be copied
        if new:
            self._form(row, region)
        elif region is not None:
            row.hits += 1
        else:
            row.note(OPENED)
        tape.__dict__.pop(_TEE, None)
        tape._watched_variables, tape._tape = tape._tape.watched_variables(), None
        return grads

    def _rent(self, key: tuple, copy: CopyKey, rec: TapeRecording, src: tuple,
              row: RegionRow, coexecuting: bool) -> tuple:
        """``_plan`` for a recording with no G: a new G if forming it pays now (in a co-executed
        iteration, in the next one: see the module docstring); else its rent account, or None
        once declined."""
        none = (None,) * 4
        rental = self.pending.get(key)
        if rental is None:
            if len(self.pending) >= MAX_PENDING:
                for pending in self.pending:  # (deferred keys are pending ones)
                    self.regions.came(pending)
                self.pending.clear()
            rental = self.pending[key] = Rental(estimate=_estimate(rec), cautious=True)
        rental.sighted(self.iteration)
        built, region = time.perf_counter(), None
        # a deferred G was found to pay: the rent its deferring call paid after may have
        # lowered its least since, and it forms all the same
        deferred = key in self.regions.awaiting
        if self._due(rental, rec, deferred):
            if coexecuting and not deferred:
                self.regions.await_call(key)  # the next iterations run for real (``settling``)
                row.note("forming: the next iteration runs for real")
                return None, rental, row, None
            region = self._new(rec, src, row)
        if region is None:
            if self.horizon is not None and rental.rent_known:
                self._decline(row, copy)
                return none
            row.note("traced")
            return None, rental, row, None
        return region, rec, row, (key, copy, rec, rental, time.perf_counter() - built)

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

    @staticmethod
    def _new(rec: TapeRecording, src: tuple, row: RegionRow) -> TapeRegion | None:
        """G for ``rec``, whose formation is due; None if it cannot be built (refused)."""
        try:
            with capture.bypass():
                return TapeRegion(rec, src, "tape_gradient")
        except Exception as error:  # noqa: BLE001 - e.g. an op without a gradient function
            row.refuse(f"cannot build the gradient function: {error}")
        return None

    def _due(self, rental: Rental, rec: TapeRecording, decided: bool) -> bool:
        """Whether ``rec``'s G should form now: seen twice or more and its formation pays (or
        that was ``decided``), and it can (a new batch size's G too: its own calls must repay
        it)."""
        pays = decided or (rental.submitted >= 2 and rental.due(self.horizon, self.scale))
        return pays and not rec.created_vars and len(self.table) < MAX_TABLE

    def _decline(self, row: RegionRow, copy: CopyKey) -> None:
        """``copy``'s recording would not repay its G before the loop ends: its copies are
        passed to TensorFlow unwired, and a call site without a G is declined whole."""
        if len(self.passed) >= MAX_MATCHED:
            self.passed.clear()
        self.passed.add(copy.key)
        if row.state != "formed":
            self._decline_site(row, "its G would not repay its formation before the loop ends")

    def _unseen(self, reason: str) -> None:
        """A call whose tape held what the copy cannot see (``reason``): after
        ``UNSEEN_AFTER`` such calls in a row its call site is declined too, so its tapes are no
        longer copied, and ``terra.regions`` says why the site has no G (mlp-functions: a
        ``tf.function`` on the tape). Calls in iterations where a region was traced do not
        count: Keras makes its variables there (``captured_value`` on the tape)."""
        row = self._row()
        if row.state == "formed" or row.source in self.declined:
            return
        seen = self.unseen[row.source] = self.unseen.get(row.source, 0) + 1
        row.note(f"traced: the copy cannot see {reason}")
        if seen >= UNSEEN_AFTER:
            self._decline_site(row, f"the copy cannot see {reason}")

    def _decline_site(self, row: RegionRow, why: str) -> None:
        if row.source in self.opened:
            return
        row.note(f"declined: {why}")
        self.declined.add(row.source)
        self.resting = all(key[1] in self.declined for key in self.rows if key[0] == "tape")

    def _check(self, new: tuple, region: TapeRegion, row: RegionRow, mine: list, theirs,
               ran: float):
        """Form G if its gradients equal the tape's bit for bit. G's are returned then: its op
        is in this iteration's trace (one run for real, ``_new``), so its next call is known.
        ``new``: G's key, the copy's key, its wiring, its rent account and the seconds its
        build took; ``ran``: its first run's."""
        key, copy, rec, rental, built = new
        with capture.bypass(), capture.quiet_reads():  # terra-nb's check: no program read
            same = all(same_bits(a, b) for a, b in zip(mine, theirs))
        self.pending.pop(key, None)
        self.regions.came(key)
        if rental.estimate > 0:  # later estimates scaled to what this one measured
            formed = FALLBACK_FACTOR * (built + ran) / rental.estimate
            self.scale = min(10.0, max(0.1, 0.5 * self.scale + 0.5 * formed))
        if not same:
            row.refuse("its compiled gradient differs from the tape's (a gradient the copy "
                       "cannot see)")
            return theirs
        self.table[key] = region
        self._match(copy, rec, region)
        self._form(row, region)
        return type(theirs)(mine)

    def _form(self, row: RegionRow, region: TapeRegion) -> None:
        """``region`` (a G) answers ``row``'s call site: the views name its op."""
        row.form(region.n_ops)
        fn = region.fn
        self.calls[fn.name] = RegionCall(fn.name, NAME, "backward", row.source, row.call,
                                         fn.op_types())


def _handles(tape, target, sources, plain: bool) -> list | None:
    """The handles of ``sources`` if the call is one a copy can answer: a plain gradient of a
    tensor, on a tape that still holds its ops, for a list or tuple of variables."""
    if tape._tape is None or not plain or type(sources) not in (list, tuple) \
            or not isinstance(target, tf.Tensor):
        return None
    handles = [backprop._handle_or_self(s) for s in sources]
    if not all(isinstance(h, tf.Tensor) and h.dtype == tf.resource for h in handles):
        return None
    return handles


def _estimate(rec: TapeRecording) -> float:
    """Seconds forming ``rec``'s G is estimated to cost: its trace and first run, and the
    fallback its new op causes."""
    return FALLBACK_FACTOR * (FORM_BASE_S + FORM_PER_OP_S * ops_to_compile(rec.ops))

