"""Which ops of a compiled segment wait for which: eager's issue order, kept where it shows.

In eager, an op runs once every op Python issued before it has succeeded. A compiled segment is a
dataflow graph, and keeps that order only where it can be seen:

- an op with side effects (a write, a random op, output) runs once every earlier op that *can
  fail* has succeeded, so that when one fails, no write issued after it takes effect;
- an op that reads a variable, or can fail, runs after the last op with side effects (it sees
  that write; when it fails, every write issued before it has taken effect, as in eager;
  tf.function's automatic control dependencies would order only ops on one resource, but cost
  ~20% of a compile).

An op that can fail runs whether or not its value is read: it is a control output of the
function. An op that cannot fail (``cannot_fail``) has no place in that order, and one whose
value nobody reads is pruned: eager's tape computes the gradient of a first convolution's input
image, which no one reads (1.7 ms of a 6.6 ms CNN training step).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import tensorflow as tf

from ..capture.signature import op_info

# Stateful ops that only read: running one although an earlier op failed changes nothing (they
# run after the last write, as every op that can fail does).
READ_ONLY = frozenset(
    {"ReadVariableOp", "VariableShape", "VarIsInitializedOp", "ResourceGather", "ResourceGatherNd"}
)


def has_side_effect(op_type: str) -> bool:
    """Whether running ``op_type`` can change state Python may see (variables, RNG, output)."""
    return op_type not in READ_ONLY and op_info(op_type).stateful


# Pure ops whose kernels check only their inputs' shapes and dtypes, their attrs, and the values
# of their integer inputs (axes, sizes, dims, and integer divisors): a float value never makes
# one fail (NaN and inf are values). Gathers, scatters, random ops, decompositions that reject a
# matrix (Cholesky), numerics checks and asserts are not here.
SHAPE_CHECKED = frozenset({
    "Abs", "Add", "AddN", "AddV2", "All", "Any", "ArgMax", "ArgMin", "AvgPool", "AvgPoolGrad",
    "BatchMatMulV2", "BatchMatMulV3", "BiasAdd", "BiasAddGrad", "BroadcastArgs",
    "BroadcastGradientArgs", "BroadcastTo", "Cast", "Ceil", "ConcatV2", "Conv2D",
    "Conv2DBackpropFilter", "Conv2DBackpropInput", "Conv3D", "Conv3DBackpropFilterV2",
    "Conv3DBackpropInputV2", "Cos", "Cumsum", "DepthwiseConv2dNative",
    "DepthwiseConv2dNativeBackpropFilter", "DepthwiseConv2dNativeBackpropInput", "DivNoNan", "Elu",
    "EluGrad", "EnsureShape", "Equal", "Erf", "Exp", "ExpandDims", "Fill", "Floor",
    "FusedBatchNormGradV3", "FusedBatchNormV3", "Greater", "GreaterEqual", "Identity", "IdentityN",
    "L2Loss", "LeakyRelu", "LeakyReluGrad", "Less", "LessEqual", "Log", "Log1p", "LogSoftmax",
    "LogicalAnd", "LogicalNot", "LogicalOr", "MatMul", "Max", "MaxPool", "MaxPoolGrad", "Maximum",
    "Mean", "Min", "Minimum", "Mul", "MulNoNan", "Neg", "NotEqual", "OnesLike", "Pack", "Pad",
    "PadV2", "Pow", "Prod", "RealDiv", "Reciprocal", "ReciprocalGrad", "Relu", "Relu6",
    "Relu6Grad", "ReluGrad", "Reshape", "Round", "Rsqrt", "RsqrtGrad", "Select", "SelectV2",
    "Selu", "SeluGrad", "Shape", "ShapeN", "Sigmoid", "SigmoidGrad", "Sign", "Sin", "Size",
    "Slice", "Snapshot", "Softmax", "Softplus", "SoftplusGrad", "Sqrt", "SqrtGrad", "Square",
    "SquaredDifference", "Squeeze", "StopGradient", "StridedSlice", "StridedSliceGrad", "Sub",
    "Sum", "Tanh", "TanhGrad", "Tile", "Transpose", "Unpack", "ZerosLike"
})


def cannot_fail(op_type: str, inputs: list) -> bool:
    """Whether the op always succeeds on these graph inputs: its type checks only what the graph
    knows statically (``SHAPE_CHECKED``), every input's shape is fully known, and every integer
    input's value is too. The same static facts held in the eager run the segment was recorded
    from, where it succeeded."""
    if op_type not in SHAPE_CHECKED:
        return False
    return all(_static(t) for t in tf.nest.flatten(inputs))


def _static(value) -> bool:
    """Whether the graph knows ``value``'s shape, and its value if it is an integer tensor (a
    value that is no graph tensor, a constant's numpy array, is known)."""
    if not isinstance(value, tf.Tensor):
        return True
    dtype = value.dtype
    if not (dtype.is_floating or dtype.is_integer or dtype.is_complex or dtype.is_bool):
        return False  # a variant (a TensorList: AddN checks lengths), a string, a resource
    return value.shape.is_fully_defined() and (not dtype.is_integer or _known(value))


_SHAPES = frozenset({"Shape", "ShapeN", "Size", "Rank"})


def prunable(op_type: str) -> bool:
    """Whether an op of ``op_type`` that nobody reads is work a segment leaves out when the
    graph knows its inputs (a shape query is too cheap to count)."""
    return op_type in SHAPE_CHECKED and op_type not in _SHAPES


def _known(tensor, depth: int = 0) -> bool:
    """Whether ``tensor``'s value follows from the graph alone: a constant, a shape of a value
    whose shape is fully known, or a shape-checked op of such values (a gradient's
    ``input_sizes``, from ``ShapeN``, which ``constant_value`` does not evaluate)."""
    op = tensor.op
    if op.type == "Const":
        return True
    if op.type in _SHAPES:
        return all(t.shape.is_fully_defined() for t in op.inputs)
    return depth < 8 and op.type in SHAPE_CHECKED and all(_known(t, depth + 1) for t in op.inputs)


class IssueOrder:
    """The control dependencies of one segment's graph, built op by op in issue order."""

    def __init__(self) -> None:
        self.graph = tf.compat.v1.get_default_graph()
        self.last_write: list = []  # the graph ops of the last op with side effects ...
        self.pending: list = []  # ... and those built since that can fail

    @contextlib.contextmanager
    def place(self, op_type: str, inputs: list) -> Iterator[None]:
        """Lower an op of ``op_type`` on ``inputs`` (graph tensors) inside this block."""
        effect = has_side_effect(op_type)
        # a read (a resource input: it can fail) sees the last write; any op that can fail runs
        # after it (when it fails, the writes issued before it have all taken effect)
        waits = not effect and not cannot_fail(op_type, inputs)
        deps = self.last_write + self.pending if effect else self.last_write if waits else None
        if deps and op_info(op_type).function:
            # TensorFlow leaves out a control input on an op that already feeds this one (a data
            # input orders it); but a call is inlined, and its body's reads of variables (inputs
            # of their own) would not wait for that op's writes: the call waits on a no-op
            with tf.control_dependencies(deps):
                deps = [tf.no_op()]
        before = len(self.graph.get_operations())
        with tf.control_dependencies(deps) if deps else contextlib.nullcontext():
            yield
        built = self.graph.get_operations()[before:]
        if effect or waits:  # runs although nothing reads it; inlined (a region's F), a later
            # write waits for it too (not for a captured handle's placeholder)
            self.graph.control_outputs.extend(o for o in built if o.type != "Placeholder")
        if effect:
            self.last_write, self.pending = built, []
        elif waits:
            self.pending.extend(built)

