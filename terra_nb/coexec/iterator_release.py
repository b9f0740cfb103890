"""Iterators the loop drops are destroyed off the loop's thread.

Destroying a ``tf.data`` iterator (its handle's last reference gone) joins its background
threads and, with autotuning on (the default), waits for an optimisation pass of the pipeline's
model that is under way: 0.5 ms to 600 ms in eager, and 120-160 ms at every epoch of a Keras
``fit`` under a Terra (Keras drops the last epoch's iterator as it makes the next one;
measured with autotuning off: 0.3-1 ms in both). TensorFlow releases the GIL while it destroys
a handle, so another thread can do it while the loop goes on.

While a Terra runs, the handle of each iterator a ``get_next`` reads in the loop is kept (one
more reference to it). At each iteration's start, a handle only this keeps (its owner dropped
it) goes to a thread that drops it. Only iterators whose late end nobody can see are kept: over
their own data (the dataset found and reading no state: ``input_pipeline.reads_state``; a
pipeline that runs Python, a generator's or a ``py_function``'s, would run its finaliser later
and on that thread), and made of datasets known to hold nothing another iterator waits for
(``PLAIN``, by class and by the op types its functions make datasets with: a ``cache`` being
filled or its file's lock, a snapshot, a save would make the next iterator fail; adversarial
review: a file cache iterated anew each iteration raised ``AlreadyExistsError``). At close,
the thread finishes what it was handed, and the handles their owners still hold are let go:
they are destroyed when their owners drop them, as without a Terra.
"""

from __future__ import annotations

import queue
import re
import sys
import threading
import weakref
from types import FrameType

from tensorflow.python.framework import dtypes, ops

from .input_pipeline import dataset_of, function_ops, reads_state

# the ops that read an iterator's next element, the iterator's handle their first input
READS_NEXT = frozenset({"IteratorGetNext", "IteratorGetNextSync", "IteratorGetNextAsOptional"})
_KEPT_ONLY_HERE = 2  # sys.getrefcount of a handle only the dict holds (the call's argument too)
# Datasets (``_MapDataset``, op ``ParallelMapDatasetV2``: "Map", "ParallelMap") whose iterators
# hold nothing but their own buffers and threads
PLAIN = frozenset({
    "Tensor", "TensorSlice", "Range", "Map", "ParallelMap", "Batch", "ParallelBatch",
    "PaddedBatch", "Prefetch", "FlatMap", "Interleave", "ParallelInterleave", "Repeat", "Take",
    "Skip", "Zip", "Concatenate", "Filter", "Shuffle", "Options", "Unbatch", "Shard",
})
_DATASET = re.compile(r"^_?(\w+?)Dataset(V\d+)?$")
_plain: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _kind(name: str) -> str | None:
    match = _DATASET.match(name)
    return match.group(1) if match else None


def holds_nothing(dataset) -> bool:
    """Whether ``dataset`` and the datasets it reads or makes in its functions are ``PLAIN``."""
    verdict = _plain.get(dataset)
    if verdict is None:
        made = (_kind(op) for f in dataset._functions() for op in function_ops(f.function))
        verdict = _plain[dataset] = _kind(type(dataset).__name__) in PLAIN \
            and all(kind in PLAIN for kind in made if kind is not None) \
            and all(holds_nothing(d) for d in dataset._inputs())
    return verdict


class IteratorRelease:
    """The iterator handles of a Terra's loop, and the thread that destroys dropped ones."""

    def __init__(self) -> None:
        self._kept: dict[int, ops.EagerTensor] = {}
        self._refused: set[int] = set()  # handles judged not to keep: not looked at again
        self._dropped: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def keep(self, op_type: str, args: tuple, frame: FrameType | None) -> None:
        """An iterator op ran in the loop: keep its iterator's handle if it is one to keep."""
        if op_type not in READS_NEXT or not args:
            return
        handle = args[0]
        if type(handle) is not ops.EagerTensor or handle._id in self._kept \
                or handle._id in self._refused or handle.dtype != dtypes.resource:
            return
        dataset = dataset_of(frame)  # a walk of the calling frames: once per iterator
        if dataset is not None and not reads_state(dataset) and holds_nothing(dataset):
            self._kept[handle._id] = handle
        else:
            self._refused.add(handle._id)

    def sweep(self) -> None:
        """Hand the handles whose owners dropped them to the destroying thread."""
        for key in [k for k in self._kept if sys.getrefcount(self._kept[k]) <= _KEPT_ONLY_HERE]:
            if self._thread is None:
                self._thread = threading.Thread(target=self._destroy, daemon=True,
                                                name="terra-iterator-release")
                self._thread.start()
            self._dropped.put(self._kept.pop(key))

    def close(self) -> None:
        """Destroy what was handed over (waits for it) and let the other handles go."""
        self.sweep()
        self._kept.clear()
        self._refused.clear()
        if self._thread is not None:
            self._dropped.put(None)
            self._thread.join()
            self._thread = None

    def _destroy(self) -> None:
        while True:
            handle = self._dropped.get()
            if handle is None:
                return
            del handle  # the iterator is destroyed here, the GIL released meanwhile
