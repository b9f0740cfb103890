"""Shape families: the regions of one call whose recordings differ only in argument shapes share
one forward function F compiled for any shape.

An optimizer's ``apply_gradients`` sees a new gradient shape with every new sequence length (an
embedding's sparse gradient), and each new shape formed a new region: a new compile of F on the
Python thread (0.3-1 s for AdamW's 700 ops) and a new op for the engine (one fallback
iteration). Recordings equal but for their argument shapes run the same ops on the same
constants, so F compiled with every dimension unknown computes each of them. Such an F is shared
only if its outputs stay fully static (they come from variables, not from the arguments):
co-execution answers a function call by its output specs. B stays per shape: it is built from
the recording's shapes, as eager backprop sees them.
"""

from __future__ import annotations

from ..capture.functions import static_outputs
from ..coexec.effect_order import prunable
from ..coexec.lower import Wire
from .recording import Recording
from .region import FastCall, Region

MAX_FAMILIES = 256  # family keys kept; beyond, the oldest are forgotten


def family_key(obj, method: str, rec: Recording) -> tuple:
    """What the calls of one family share: the object, the method, and the recording but for
    its argument shapes (``Recording.key`` without ``args``, dtypes and ranks kept)."""
    key = rec.key()
    ranks = tuple((dtype, len(shape)) for dtype, shape in rec.args)
    return id(obj), method, key[:5] + key[6:], ranks


class Families:
    """Per family key: the argument specs it first formed with, and its shared F once a second
    shape formed (False: F for any shape has shape-dependent outputs, or failed to compile)."""

    def __init__(self) -> None:
        self._first: dict[tuple, tuple] = {}
        self._shared: dict[tuple, FastCall | bool] = {}

    def shared(self, key: tuple) -> FastCall | None:
        """The family's shared F, if it has one."""
        shared = self._shared.get(key)
        return shared if isinstance(shared, FastCall) else None

    def join(self, key: tuple, region: Region) -> bool:
        """``region`` formed in family ``key``; whether it answers with the family's F, compiled
        now, once, when the family sees its second shape, or at its first when no output of the
        call is computed from its arguments (an optimizer's update: its outputs cannot follow
        their shapes, so one F serves every shape and a new shape is no new op) and it does no
        work that only its own F leaves out (``_dead_work``)."""
        first = self._first.setdefault(key, region.rec.args)
        if len(self._first) > MAX_FAMILIES:
            oldest = next(iter(self._first))
            del self._first[oldest]
            self._shared.pop(oldest, None)
        shared = self._shared.get(key)
        rec = region.rec
        if shared is None and (first != rec.args
                               or not (_outputs_from_args(rec) or _dead_work(rec))):
            shared = self._shared[key] = _any_shape(region) or False
        if shared:
            region.forward = shared
        return bool(shared)

    def drop(self, obj_id: int) -> None:
        """Forget the families of a collected object."""
        self.forget({k[0] for k in self._first} - {obj_id})

    def forget(self, obj_ids: set[int]) -> None:
        """Drop the families of objects no region is kept for."""
        for key in [k for k in self._first if k[0] not in obj_ids]:
            del self._first[key]
            self._shared.pop(key, None)


def _any_shape(region: Region) -> FastCall | None:
    """F of ``region`` compiled with every argument dimension unknown, if its outputs are still
    fully static; None otherwise (or if it cannot be compiled)."""
    try:
        forward = region.compile_forward(any_shape=True)
    except Exception:  # noqa: BLE001 - the region keeps its own F
        return None
    return forward if static_outputs(forward.name) is not None else None


def _dead_work(rec: Recording) -> bool:
    """Whether the recorded call computes a value nobody reads that its F for its own shapes
    prunes (``effect_order``: an op that cannot fail, which only known shapes tell), while F for
    any shape would run it: eager's gradient of a first convolution's input image, a quarter
    of a CNN's training step."""
    read = {w.index for op in rec.ops for w in op.inputs if w.kind == "op"}
    read.update(w.index for w in rec.out_wires if isinstance(w, Wire) and w.kind == "op")
    return any(op.n_outputs and p not in read and prunable(op.op_type)
               for p, op in enumerate(rec.ops))


def _outputs_from_args(rec: Recording) -> bool:
    """Whether an output of the recorded call is an argument or computed from one."""
    from_args = set()
    for p, op in enumerate(rec.ops):
        if any(w.kind == "arg" or (w.kind == "op" and w.index in from_args) for w in op.inputs):
            from_args.add(p)
    return any(w.kind == "arg" or (w.kind == "op" and w.index in from_args)
               for w in rec.out_wires if isinstance(w, Wire))
