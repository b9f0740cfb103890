"""Tapes whose gradients TensorFlow would sum in another order than eager's, because a region's
hit is one op on them (``tape_open``): their gradients are computed over the opened copy.

Per copy key (a tape's structure, ``tape_key``) the verdict is made once, with symbols. Where the
orders differ, each call replays TensorFlow's gradient functions over the opened copy, op by op,
until its own G pays (the rent rule of every purchase, ``coexec/rental.py``): G compiled over the
opened copy, its first gradients checked against the replay's bit for bit, then answering the
copies with that key without wiring them (``CopyValues``). A model called twice in a step with
its weight penalty written out (a 32-64-64-1 MLP, Adam): 50 it/s eager, 70 replayed, 264 with its
G. Sources in any structure, watched tensors, an output gradient and ``UnconnectedGradients.ZERO``
are replayed; G answers variables' gradients only. Where a copy cannot be followed (several
targets at once; an op it cannot see), regions take no hit on tapes pushed at its site.
"""

from __future__ import annotations

import time

import tensorflow as tf
from tensorflow.python.eager import backprop, record

from .. import capture
from ..capture.placeholder import Placeholder
from ..capture.recorder import flatten
from ..coexec.rental import Rental
from .backward import reads_twice, wire_key
from .tape import FETCHED, TapeRecording, TapeRegion, TapeTee, same_bits, tape_inputs
from .tape_key import CopyKey, CopyValues, arg_sources
from .tape_open import Bound, OpenedTape, replay, same_sums

MAX_KEPT = 256  # verdicts and G functions kept per Terra (by copy key)


class EagerOrder:
    """The verdicts, rents and G functions of the opened copies of one Terra's tapes."""

    def __init__(self, tapes, estimate) -> None:
        self.tapes = tapes  # its loop's horizon, iteration, formation scale and G's call time
        self.estimate = estimate  # seconds a G of a copy's ops is estimated to cost
        self.orders: dict[tuple, bool] = {}  # copy key -> whether TensorFlow sums as eager
        self.formed: dict[tuple, tuple] = {}  # copy key -> (G, where its arguments are, copy)
        self.rents: dict[tuple, Rental] = {}
        self.unformed: dict[tuple, bool] = {}  # copy keys whose G could not be made, or whose
        # first gradients were not the replay's (gather slices summed dense): so would the next
        self.awaited: set[tuple] = set()  # G due in a co-executed iteration: formed next
        self.unfollowed: dict[str, str] = {}  # tape site -> why its copy could not be followed
        self.hit_taped = False  # a region took a hit on a copied tape: tapes stay copied
        self.vetted: set[str] = set()  # tape sites whose gradient was seen, its copy followed
        self.broke: set[str] = set()  # vetted sites whose last copy could not see an op

    def followed(self, tee: TapeTee, target) -> bool:
        """Whether ``gradient`` consults the copy: it holds a region's hit and can be read.
        Where the copy cannot be followed, TensorFlow's gradient may sum in another order than
        eager's, so tapes pushed at its site take no hit from then on (``refuses_hits``): several
        targets at once (the tape starts from their ops in the order of a C++ hash map, tape.h
        InitialStack); a copy that cannot see an op (a custom gradient, a tf.function) where
        Keras calls on it may be summed apart from the rest (an object called twice, or hits
        that did: ``_summed_apart``). An op reading a value fetched while the tape recorded,
        behind its link to the placeholder, breaks that tape's copy alone. A site takes hits
        once one of its gradients was seen (``vetted``)."""
        if len(tf.nest.flatten(target)) != 1:
            self._unfollowed(tee, "several targets at once")
            return False
        if tee.broken == FETCHED:
            return False
        if tee.broken:
            if max(tee.calls.values(), default=0) > 1 or _summed_apart(tee) or _read_thrice(tee):
                self._unfollowed(tee, tee.broken)
            else:
                self.vetted.add(tee.site)
                self.broke.add(tee.site)
            return False
        self.vetted.add(tee.site)
        self.broke.discard(tee.site)  # (its last tape did not break: one made a function once)
        return bool(tee.regions)

    def copies_needed(self) -> bool:
        """Whether tapes stay copied when no call site would form a G: a region took a hit on a
        copied tape (its sums are followed), or refuses hits on some (a copy names its site)."""
        return self.hit_taped or bool(self.unfollowed)

    def refuses_hits(self) -> bool:
        """Whether a region may not answer a call now: a tape recording it was pushed where no
        gradient was seen yet, or where a copy could not be followed (its calls run their
        Python, their ops on the tape)."""
        return any(t.site not in self.vetted or t.site in self.unfollowed
                   for t in self.tapes.active)

    def refuses(self, region) -> bool:
        """Whether a hit of ``region`` may not land now: a tape recording it was pushed where
        the last tape broke (an op the copy cannot see, so TensorFlow sums its gradient) and the
        region reads a variable or an input twice (its B would sum those terms apart from the
        tape's: ``_summed_apart``). Tapes not copied (resting) name no site: any tape then."""
        if not self.broke or not region.reads_twice:
            return False
        if self.tapes.resting:
            return record.could_possibly_record()
        return any(t.site in self.broke for t in self.tapes.active)

    def _unfollowed(self, tee: TapeTee, why: str) -> None:
        """Refuse hits at ``tee``'s site from now on; None (``gradients``: TensorFlow's)."""
        if tee.site not in self.unfollowed:
            self.unfollowed[tee.site] = why
            self.tapes._row().note(f"no hits on the tapes of {tee.site}: its gradient cannot "
                                   f"be summed in eager's order over the regions' ops ({why})")

    def gradients(self, tee: TapeTee, target, sources, watched: frozenset,
                  output_gradients=None, zeros: bool = False) -> tuple | None:
        """(the gradients of ``sources`` summed over the opened copy, the G that answered or
        formed or None, whether it formed now) where TensorFlow's tape would sum some in another
        order; None where its order is eager's, or where the copy cannot be opened (TensorFlow's
        gradient then). ``zeros``: unconnected sources get zeros. The copy's key and wiring are
        left on ``tee`` for the tape region's guard and rent."""
        targets, flat = tf.nest.flatten(target), tf.nest.flatten(sources)
        handles = [backprop._handle_or_self(s) for s in flat]
        seeds = None if output_gradients is None else tf.nest.flatten(output_gradients)
        variables = [h for h in handles if isinstance(h, tf.Tensor) and h.dtype == tf.resource]
        if not all(isinstance(t, tf.Tensor) for t in targets + handles) or (
                seeds is not None and len(seeds) != len(targets)):
            return self._unfollowed(tee, "a target or source that is not a tensor")
        # what a G answers: no output gradient, sources all variables
        plain = seeds is None and len(variables) == len(handles) and not tee.watches
        try:
            copy = tee.copy = CopyKey(tee, target, watched, variables)
            key = (copy.key, tuple(copy.name(h) for h in handles if h.dtype != tf.resource),
                   tuple((at, tuple(map(copy.name, ts))) for at, ts in tee.watches))
            verdict = self.orders.get(key)
            if verdict is True:
                return None
            formed = self.formed.get(key) if plain else None
            if formed is None:
                rec = tee.wired = TapeRecording(tee, target, watched)
                keys, seen = _keys(rec, handles), _watched(rec, tee.watches)
                if len(rec.outs) != len(targets) or seen is None:
                    return self._unfollowed(tee, "a target not made on the tape, or a watch of "
                                                 "a tensor an op had read")
                opened = OpenedTape(rec)
                if verdict is None:
                    verdict = _keep(self.orders, key, same_sums(rec, opened, keys, seen))
        except Exception:  # noqa: BLE001 - a copy it cannot open: TensorFlow's gradient
            return self._unfollowed(tee, "an op the copy cannot open")
        new = None  # a G formed now: its key and the replay's gradients, to check its own
        if formed is None:
            if verdict:
                return None
            start = time.perf_counter()
            grads = replay(opened, keys, seeds, seen)
            formed = None if not plain or not self.tapes.forms else self._rent(
                copy, key, rec, opened, rec.source_keys(handles), time.perf_counter() - start,
                type(target) is Placeholder)
            if formed is None:
                return _packed(sources, flat, grads, zeros), None, False
            new = (key, grads)
        grads, region, formed_now = self._answer(formed, copy, new)
        return _packed(sources, flat, grads, zeros), region, formed_now

    def _answer(self, formed: tuple, copy: CopyKey, new: tuple | None) -> tuple:
        """(gradients, G or None, whether G formed now) by G at its one call site, so that its
        first call (formed now, ``new``: its key and the replay's gradients) and every later one
        are one op of the TraceGraph. A new G is kept if its gradients are the replay's bit for
        bit; else the replay's answer (the replay goes on)."""
        region, where, opened = formed
        try:
            grads = region.run(Bound(opened, CopyValues(copy, where)))
        except Exception:  # noqa: BLE001 - a new G whose op has no graph gradient
            if new is None:
                raise
            grads = None
        if new is not None:
            key, replayed = new
            with capture.bypass(), capture.quiet_reads():  # terra-nb's check: no program read
                same = grads is not None and all(
                    same_bits(a, b) for a, b in zip(grads, replayed))
            if not same:
                _keep(self.unformed, key, True)
                return replayed, None, False
            _keep(self.formed, key, formed)
        return grads, region, new is not None

    def _rent(self, copy: CopyKey, key: tuple, rec: TapeRecording, opened: OpenedTape,
              keys: tuple, seconds: float, coexecuting: bool) -> tuple | None:
        """The replay's rent; G over ``opened`` once it pays, in an iteration run for real (its
        first call is an op co-execution has not seen): (G, where its arguments are, the copy),
        to be checked by its first call (``_answer``)."""
        tapes = self.tapes
        if key in self.unformed:
            return None
        rental = self.rents.get(key)
        if rental is None:
            rental = _keep(self.rents, key,
                           Rental(estimate=self.estimate(opened), cautious=True))
        rental.sighted(tapes.iteration)
        rental.paid(max(0.0, seconds - tapes.hit_s))
        if rental.submitted < 2 or not rental.due(tapes.horizon, tapes.scale) or rec.created_vars:
            return None
        if coexecuting:
            if key not in self.awaited:
                self.awaited.add(key)
                tapes.regions.await_call(("opened", key))
            return None
        tapes.regions.came(("opened", key))
        self.awaited.discard(key)
        self.rents.pop(key, None)
        sources = arg_sources(copy, rec.externals, rec.numpy_args)
        try:
            with capture.bypass():
                region = TapeRegion(opened, keys, "tape_gradient_opened")
        except Exception:  # noqa: BLE001 - an op without a graph gradient: the replay goes on
            region = None
        if region is None or sources is None or not all(
                opened.kept(k) for k, used in zip(region.keys, region.used) if used):
            _keep(self.unformed, key, True)  # the copy's structure: so would the next one
            return None
        return region, sources, opened


def _summed_apart(tee: TapeTee) -> bool:
    """Whether the tape's hits may give a variable or an input a gradient their B summed before
    TensorFlow's tape adds it to the rest, where eager's adds every term in one order: two hits,
    or one whose ops read a variable or an input twice. (One hit reading each once gives one
    term, as eager's single op would: its order cannot differ.)"""
    if len(tee.regions) > 1:
        return True
    for backward, _ in tee.regions.values():
        if backward.opens is None:
            return True
        region, watched, _keys = backward.opens
        if reads_twice(region, watched):
            return True
    return False


def _read_thrice(tee: TapeTee) -> bool:
    """Whether a variable, or a value made on the tape, is read by three ops or more: a hit
    among them gives its term at another point of TensorFlow's walk than eager's ops would,
    and three terms or more add in the order they come (two add alike either way)."""
    made = {id_ for *_, outputs, _paused in tee.raw for id_ in _ids(outputs)}
    reads: dict[int, int] = {}
    for p in range(len(tee.raw)):
        for x, _ in tape_inputs(tee, p):
            i = getattr(x, "_id", None)
            if i is not None and (i in made or getattr(x, "dtype", None) == tf.resource):
                reads[i] = reads.get(i, 0) + 1
                if reads[i] > 2:
                    return True
    return False


def _ids(outputs) -> list[int]:
    return [t._id for t in flatten(outputs) if hasattr(t, "_id")]


def _keys(rec: TapeRecording, handles: list) -> tuple:
    """The copy's value key of each source: a variable's handle, or a tensor (an argument or an
    op's output; None: not read)."""
    caps = rec.source_keys(handles)
    return tuple(rec.key_of(h) if h.dtype != tf.resource else None if c is None else ("var", c)
                 for h, c in zip(handles, caps))


def _watched(rec: TapeRecording, watches: list) -> frozenset | None:
    """The copy's value keys of the tensors the tape watched; None if an op copied before a
    watch read that tensor (it was not on the tape then: the copy cannot say)."""
    keys = set()
    for at, tensors in watches:
        for t in tensors:
            key = rec.key_of(t)
            if key is None:
                continue
            if any(wire_key(w) == key for op in rec.ops[:at] for w in op.inputs):
                return None
            keys.add(key)
    return frozenset(keys)


def _packed(sources, flat: list, grads: list, zeros: bool):
    """``grads`` in the structure of ``sources``, as the tape returns them (zeros where a
    source is unconnected, with ``UnconnectedGradients.ZERO``)."""
    if zeros:
        grads = [tf.zeros_like(s) if g is None else g for s, g in zip(flat, grads)]
    return tf.nest.pack_sequence_as(sources, grads)


def _keep(table: dict, key, value):
    if len(table) >= MAX_KEPT:
        table.clear()
    table[key] = value
    return value

