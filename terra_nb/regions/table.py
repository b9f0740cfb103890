"""``Regions``: the guard, the calls traced on the way to a region, formation, hits and misses.

A call is keyed by its guard (object identity, method, argument specs: tensors by dtype and
shape, Python scalars by value, other objects by identity, keyword names). The state part of the
guard (the count of variables created in the loop's thread, and the Python state reachable from
the object: ``python_state``) is checked on every hit. A call forms a region after two traced
runs with the same recording (ops, attrs, constants, handles) and no Python-visible effect; a
call whose traced runs show an effect ``REFUSE_AFTER`` times in a row is refused: it runs op by
op from then on.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Callable

from tensorflow.python.framework import op_def_registry

from ..capture.location import user_line
from ..trace.tracegraph import RegionCall
from .effects import STEP_METHODS
from .families import Families, family_key
from .function_calls import FunctionCalls
from .guard_key import Unguardable, guard_key, numpy_as_tensors, variables_in
from .recording import Recording
from .region import DECLINED, Region
from .state_walk import UnguardedState
from .summary import RegionRow, RegionSummary
from .tapes import Tapes
from .traced_call import TracedCall, unsound_ops
from .variants import MAX_VARIANTS, Variants

_MISS = object()  # Regions._hit: no region answered the call
_REFUSED = object()  # Regions._hit: a region may not answer it now (its Python runs, untraced)
REFUSE_AFTER = 3  # traced calls in a row with an effect
MAX_PENDING = 256
AWAIT_ITERATIONS = 4  # iterations run for real that a call awaited there is waited for
MAX_SPECS = 16  # guard keys per object and method: beyond, a Python value changes every call


class Regions:
    """The regions of one Terra: formed ones by guard key, traced calls pending, one row each."""

    def __init__(self) -> None:
        self.table: dict[tuple, Region] = {}
        # recordings of traced runs by guard key, one per way its branches went (the latest)
        self.pending: dict[tuple, list[Recording]] = {}
        self.rows: dict[tuple, RegionRow] = {}
        self.formed_for: dict[tuple, int] = {}  # (object id, method) -> regions formed
        self.specs_for: dict[tuple, int] = {}  # (object id, method) -> rows (guard keys)
        self.epoch = 0  # variables created in the loop's thread
        self.changed = False  # a call was traced on its way to a region, or one formed
        self.forming: dict[str, str] = {}  # call -> what it did to set ``changed`` (for why)
        # keys whose next call must come in an iteration run for real -> iterations waited
        self.awaiting: dict[tuple, int] = {}
        self.dropped: dict[str, RegionCall] = {}  # the functions of regions no longer formed
        self.families = Families()
        self.variants = Variants()  # regions set aside when a branch went the other way
        self.tapes = Tapes(self)  # GradientTape.gradient answered by one function
        self.functions = FunctionCalls(self)  # user tf.function calls, dispatched once
        self.marks: list[tuple[str, float, float]] = []  # this iteration's hits: call, start, end
        self._keys_of: dict[int, list[tuple]] = {}  # object id -> (guard key, method) of its rows
        self._gone: list[int] = []  # ids of collected objects (their finalizers append them)
        # how a model's step runs its Python with the calls inside it answered (``intercept``)
        self.open_step: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext

    def summary(self) -> RegionSummary:
        return RegionSummary(tuple(r.frozen() for r in self.rows.values()))

    def _forget_gone(self) -> None:
        """Forget the objects collected since the last call: drop their regions, rows and counts
        (an object made later at the same address starts afresh, with a row of its own). A row
        that hit stays listed as collected; the others fold into one row per call site (a loss
        made anew every step would add a row every step). Not when listing: the rows of objects
        dropped after the loop say what happened to them."""
        while self._gone:
            ident = self._gone.pop()
            for key, method in self._keys_of.pop(ident, ()):
                if key in self.table:
                    self._drop(key)
                self.variants.forget(key)
                self.pending.pop(key, None)
                self.specs_for.pop((ident, method), None)
                self.formed_for.pop((ident, method), None)
                self.retire_row(key)
            self.families.drop(ident)

    def retire_row(self, key: tuple) -> None:
        """The object of row ``key`` was collected: a row that hit stays listed as collected
        (under a key no object has); the others fold into one row per call site."""
        row = self.rows.pop(key, None)
        if row is None:
            return
        if row.hits or row.earlier:
            row.collected()
            self.rows[("collected", id(row), *key)] = row
        else:
            self._fold(row)

    def _fold(self, row: RegionRow) -> None:
        folded = self.rows.get(("gone", row.name, row.source))
        if folded is None:
            folded = self.rows[("gone", row.name, row.source)] = RegionRow(
                row.name, row.source, row.call)
        folded.objects += 1
        folded.misses += row.misses
        last = f"; the last: {row.reason}" if row.reason else ""
        folded.state = "refused" if row.state == "refused" else "tracing"
        folded.reason = (f"{folded.objects} objects made anew, each collected before a region "
                         f"answered it{last}")

    def _watch(self, obj, key: tuple, method: str) -> None:
        """Remember ``key`` as a row of ``obj``, to forget when ``obj`` is collected."""
        keys = self._keys_of.get(id(obj))
        if keys is None:
            try:  # the list, not self: a finalizer must not keep the Regions alive
                weakref.finalize(obj, self._gone.append, id(obj))
            except TypeError:  # not weakly referenceable: its rows stay
                return
            keys = self._keys_of[id(obj)] = []
        keys.append((key, method))

    def region_calls(self) -> dict[str, RegionCall]:
        """Every compiled function of the regions formed so far, by op type (its name)."""
        calls = dict(self.dropped)
        calls.update(self.tapes.calls)
        for key, region in [*self.table.items(), *self.variants.regions()]:
            row = self.rows[key]
            calls.update((c.op_type, c) for c in region.calls(row.source, row.call))
        return calls

    def carry_over(self) -> None:
        """At the start of a new Terra's loop (a re-run cell): keep the regions whose objects
        are alive and whose Python state is as when they formed, and start their variable
        counts and hits afresh."""
        self.pending.clear()
        self.tapes.pending.clear()
        self.variants.clear()
        for row in self.rows.values():
            row.new_run()
        for key, region in list(self.table.items()):
            if region.objects() is None or not region.python.carried_over():
                self.rows[key].miss("the object was dropped or changed between runs")
                self._drop(key)
            else:
                region.epoch = self.epoch
        self.families.forget({id(region.obj) for region in self.table.values()})

    def await_call(self, key: tuple) -> None:
        """``key``'s next call is an op co-execution has not seen (a region's first answer, a
        tape's G to form): co-executed, it would be a fallback. The next iterations run for real
        until it comes (another length, another path may come first), ``AWAIT_ITERATIONS`` at
        most."""
        self.awaiting[key] = 0
        self.changed = True
        row = self.rows.get(key)
        self.forming[row.name if row else "GradientTape.gradient"] = "its new function's first call"

    def came(self, key: tuple) -> None:
        """``key``'s call is awaited no more (it came, or its region or rent account is gone)."""
        self.awaiting.pop(key, None)

    def end_iteration(self) -> None:
        """The Terra iteration ended: the next one runs for real while a call is awaited."""
        self.tapes.end_iteration()
        self.awaiting = {key: waited + 1 for key, waited in self.awaiting.items()
                         if waited < AWAIT_ITERATIONS}
        if self.awaiting:
            self.changed = True
            for key in self.awaiting:
                row = self.rows.get(key)
                self.forming[row.name if row else "GradientTape.gradient"] = \
                    "its new function's first call, awaited"

    def _drop(self, key: tuple) -> None:
        """The region of ``key`` is no longer answered; its functions stay named."""
        self.came(key)
        region, row = self.table.pop(key), self.rows[key]
        self.dropped.update((c.op_type, c) for c in region.calls(row.source, row.call))

    def call(self, obj, method: str, fn, args: tuple, kwargs: dict):
        """Answer ``fn(*args, **kwargs)`` (``obj.method``): a hit, or a run of its Python (traced
        on the way to a region, or not). The Python runs from one line whatever the reason, so
        its ops have one program location."""
        start = time.perf_counter()
        if self._gone:  # before the guard: a new object may have a collected one's address
            self._forget_gone()
        args = tuple(list(a) if type(a) is zip else a for a in args)  # apply_gradients(zip(..))
        # numpy data is an argument of the region, as the tensor Keras would convert it to
        args, kwargs = numpy_as_tensors(args), {k: numpy_as_tensors(v) for k, v in kwargs.items()}
        tracing = None
        for tee in self.tapes.active:
            tee.calls[id(obj)] = tee.calls.get(id(obj), 0) + 1
        if not self.tapes.eager.refuses_hits():  # (else its ops go on the tape: eager's sums)
            tracing = self._answer(obj, method, args, kwargs, start)
            if isinstance(tracing, tuple):  # a hit
                return tracing[0]
        with tracing or (self.open_step() if method in STEP_METHODS else contextlib.nullcontext()):
            result = fn(*args, **kwargs)
        if tracing is not None:
            tracing.finish(result)
        return result

    def _answer(self, obj, method: str, args: tuple, kwargs: dict, start: float):
        """A hit's result (in a 1-tuple), the ``TracedCall`` its Python runs in, or None."""
        try:
            key, tensors = guard_key(obj, method, args, kwargs)
        except Unguardable as why:
            self._row(("unguardable", id(obj), method), obj, method).refuse(str(why))
            return None
        result = self._hit(key, obj, tensors)
        if result is _REFUSED:
            return None
        if result is not _MISS:
            self.marks.append((self.rows[key].name, start, time.perf_counter()))
            return (result,)
        row = self._row(key, obj, method)
        if row.state != "refused" or row.refusals < REFUSE_AFTER:
            return TracedCall(self, key, row, obj, tensors, args + tuple(kwargs.values()))
        return None

    def _hit(self, key: tuple, obj, tensors: list):
        """The region's answer to the call, or ``_MISS`` (its Python must run)."""
        region = self.table.get(key) or self._set_aside(key, tensors)
        if region is None:
            if key not in self.rows and self.formed_for.get((id(obj), key[1])):
                self._row(key, obj, key[1]).misses += 1  # new specs for an object with regions
            return _MISS
        row = self.rows[key]
        if region.obj is not obj or region.objects() is None:
            row.miss("another object at the address of a dropped one")
        elif region.epoch != self.epoch:
            row.miss("a variable was created")
        elif not region.python.holds():
            row.miss("Python state changed: " + ", ".join(region.python.changed()[:4]))
        elif not region.branches_hold(tensors) and not (
                region := self._other_way(key, region, tensors)):
            row.miss("a branch decided in Python went the other way")
            return _MISS  # set aside, not dropped: a later call may go its way
        elif self.tapes.eager.refuses(region):  # (its ops go on the tape: eager's sums)
            return _REFUSED
        else:
            result = region.run(tensors)
            if result is not DECLINED:
                if row.state != "formed":  # a way set aside answers again
                    row.form(region.n_ops)
                row.hits += 1
                self.came(key)
                return result
            # B is not differentiable: a call whose gradient may be taken again (two tapes, a
            # persistent one), or one whose F or B cannot be compiled, runs its Python from now on
            self._refuse_for_good(row, region.broken or (
                "its gradient may be differentiated again (two tapes record, as in a GAN step, "
                "or a persistent tape): the backward function is not differentiable"))
        self._drop(key)
        return _MISS

    def keep_pending(self, key: tuple, recordings: list[Recording]) -> None:
        """Keep the traced runs of ``key`` still waiting for a second equal one: the latest of
        each way its branches went (``MAX_VARIANTS``)."""
        if recordings:
            if len(self.pending) >= MAX_PENDING:
                self.pending.clear()
            self.pending[key] = recordings[-MAX_VARIANTS:]

    def _set_aside(self, key: tuple, tensors: list) -> Region | None:
        """A region set aside for ``key`` whose branches go this call's way, back in the table."""
        region = self.variants.take(key, tensors, self.epoch)
        if region is not None:
            self.table[key] = region
        return region

    def _other_way(self, key: tuple, region: Region, tensors: list) -> Region | None:
        """The call's branches go another way than ``region``'s: it is set aside, and the region
        set aside for this way, if any, answers instead."""
        other = self.variants.take(key, tensors, self.epoch)
        self.variants.set_aside(key, region)
        if other is None:
            del self.table[key]
            self.came(key)
        else:
            self.table[key] = other
        return other

    @staticmethod
    def _refuse_for_good(row: RegionRow, reason: str) -> None:
        """Refused whatever later traced runs show: the call runs op by op from now on."""
        row.refuse(reason)
        row.refusals = REFUSE_AFTER

    def _row(self, key: tuple, obj, method: str) -> RegionRow:
        row = self.rows.get(key)
        if row is None:
            ident = (id(obj), method)
            self.specs_for[ident] = specs = self.specs_for.get(ident, 0) + 1
            if specs > MAX_SPECS:  # one row for the rest, refused: they run op by op
                row = self.rows.get(("many", *ident))
                if row is None:
                    row = self.rows[("many", *ident)] = RegionRow(
                        f"{type(obj).__name__}.{method}", *user_line())
                    self._refuse_for_good(row, f"more than {MAX_SPECS} argument specs (a Python "
                                               f"argument that changes every call?)")
                    self._watch(obj, ("many", *ident), method)
                return row
            row = self.rows[key] = RegionRow(f"{type(obj).__name__}.{method}", *user_line())
            self._watch(obj, key, method)
        return row

    def form(self, key, row: RegionRow, obj, rec: Recording, objs: list, args,
             arguments: list) -> None:
        """Make the region of ``key`` from its recording (or refuse it, saying why)."""
        variables = {}
        owned = [v for o in objs for v in getattr(o, "variables", [])]
        for v in owned + variables_in(args):
            handle = getattr(v, "handle", None)
            if handle is not None:
                variables[handle._id] = v
        unknown = [h for h in rec.handles.values() if h._id not in variables]
        if unknown:  # the call's structure (a lookup table's): every run reads them
            self._refuse_for_good(row, f"reads {len(unknown)} variable(s) the object does not "
                                       f"own")
            return
        calls = sorted({op.op_type for op in rec.ops if op_def_registry.get(op.op_type) is None})
        if calls:  # regions lower ops by their OpDef
            self._refuse_for_good(row, f"cannot compile the call: it calls function {calls[0]} "
                                       f"(function calls inside a region are not supported)")
            return
        region = self.variants.reuse(key, rec.key())  # a way of its branches formed before
        why = None if region else unsound_ops(rec)
        if why:
            self._refuse_for_good(row, why)
            return
        try:
            region = region or Region(rec, variables, obj, row.name)
        except Exception as error:  # noqa: BLE001 - e.g. an op terra-nb cannot lower
            self._refuse_for_good(row, f"cannot compile the call: {error}")
            return
        if not region.guarded_branches:  # the call's structure: every run reads so
            self._refuse_for_good(row, "value read: a branch decided after the call changed a "
                                       "variable (its value cannot be computed before the call)")
            return
        try:
            region.watch(objs, arguments)
        except UnguardedState as why:
            self._refuse_for_good(row, why.reason())
            return
        row.any_shape = self.families.join(family_key(obj, key[1], rec), region)
        region.epoch = self.epoch
        self.table[key] = region
        ident = (id(obj), key[1])
        self.formed_for[ident] = self.formed_for.get(ident, 0) + 1
        row.form(region.n_ops)
        self.await_call(key)  # its function's first call
