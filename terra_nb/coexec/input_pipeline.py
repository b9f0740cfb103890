"""Whether an input-pipeline op must wait for the graph: a dataset's functions may read state
the graph writes.

The graph never runs an iterator or a dataset op: Python runs them, on the synchronous executor,
where a read is not ordered after a write still pending on the asynchronous one. Most pipelines
read only their own data (arrays, files, tensors captured when the dataset was made) and need no
wait, which keeps the ``get_next`` at the top of each Keras ``fit`` step from waiting for the
step before. A pipeline whose functions read a variable (a ``map`` scaled by a schedule
variable), run Python (``from_generator``, ``py_function``: Python may read anything) or run any
other stateful op that is not a random stream of its own must see the writes issued before it,
as in eager execution: Python waits for the graph first (adversarial review: ``next(it)`` in an
iteration saw the variable as it was before the iteration's queued ``assign_add``).

The dataset is found among the calling frames of TensorFlow's own code (an iterator's
``_dataset``); where it is not found, Python waits. What is not read is assumed to read state:
a function that captures a handle or a dataset (a second review: a ``flat_map`` returning a
captured dataset that reads a variable, a distributed dataset's per-device generator over its
multi-device iterator), a dataset a ``tf.function`` returned, ``reduce``'s own function. A
dataset's verdict is kept for its lifetime.
"""

from __future__ import annotations

import weakref
from types import FrameType
from typing import Any

from tensorflow.python.data.ops.dataset_ops import DatasetV2
from tensorflow.python.framework import dtypes, op_def_registry

from ..capture.signature import ITERATOR_OPS

# The ops that run a dataset's functions now (the rest make datasets and iterators).
RUNS_FUNCTIONS = frozenset({
    "IteratorGetNext", "IteratorGetNextSync", "IteratorGetNextAsOptional",
    "MultiDeviceIteratorGetNextFromShard", "MultiDeviceIteratorInit", "ReduceDataset",
    "DatasetToSingleElement",
})
# Stateful ops that read nothing the loop writes: their own random streams, checks, prints,
# function calls (whose bodies are read too).
_OWN_STATE = frozenset({
    "Assert", "Print", "PrintV2", "NoOp", "PartitionedCall", "StatefulPartitionedCall",
    "Multinomial", "TruncatedNormal", "ParameterizedTruncatedNormal",
    "AnonymousSeedGenerator", "DeleteSeedGenerator", "DummySeedGenerator",
    "AnonymousRandomSeedGenerator", "DeleteRandomSeedGenerator",
}) | ITERATOR_OPS
# Datasets whose making is not known here (a dataset a tf.function returned, from_variant; a
# distributed dataset's per-device generators over their multi-device iterator).
_OPAQUE = frozenset({"_VariantDataset", "_PerDeviceGenerator", "_ReincarnatedPerDeviceGenerator"})
_FRAMES = 8  # calling frames looked at for the dataset
_verdicts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def waits_for_graph(op_type: str, frame: FrameType | None) -> bool:
    """Whether Python must let the graph run what it issued before running this pipeline op
    (``frame``: where it was called from)."""
    if op_type not in RUNS_FUNCTIONS:
        return False
    if op_type == "ReduceDataset":
        return True  # its reduce function is not the dataset's: not read, so assumed to read
    dataset = dataset_of(frame)
    return dataset is None or reads_state(dataset)


def reads_state(dataset: DatasetV2) -> bool:
    """Whether ``dataset``'s functions, or those of the datasets it reads, read state."""
    verdict = _verdicts.get(dataset)
    if verdict is None:
        verdict = type(dataset).__name__ in _OPAQUE \
            or any(_function_reads_state(f.function) for f in dataset._functions()) \
            or any(reads_state(d) for d in dataset._inputs())
        _verdicts[dataset] = verdict
    return verdict


def _function_reads_state(function: Any) -> bool:
    """A captured handle (a variable, an iterator, a table) or dataset (whose functions are not
    in this one's library) may read state; so may a stateful op that is not its own."""
    if any(t.dtype in (dtypes.resource, dtypes.variant) for t in function.captured_inputs):
        return True
    return any(_reads_state(op) for op in function_ops(function))


def function_ops(function: Any) -> list[str]:
    """The op types of a dataset function's graph and of the functions it calls."""
    graph_def = function.graph.as_graph_def()
    nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
    return [node.op for node in nodes]


def _reads_state(op_type: str) -> bool:
    if op_type in _OWN_STATE or op_type.startswith(("Random", "Stateless")):
        return False
    op_def = op_def_registry.get(op_type)
    return op_def is None or op_def.is_stateful  # an op it does not know: assume it reads


def dataset_of(frame: FrameType | None) -> DatasetV2 | None:
    """The dataset a ``self`` of TensorFlow's calling frames is, or iterates."""
    for _ in range(_FRAMES):
        if frame is None:
            return None
        # only TensorFlow's frames: a snapshot of a user frame's locals would keep its objects
        if frame.f_globals.get("__name__", "").startswith("tensorflow."):
            owner = frame.f_locals.get("self")
            if isinstance(owner, DatasetV2):
                return owner
            dataset = getattr(owner, "_dataset", None)
            if isinstance(dataset, DatasetV2):
                return dataset
        frame = frame.f_back
    return None
