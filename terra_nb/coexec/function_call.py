"""A compiled function called as one eager op, with the config every compiled function runs
with (segments, regions, whole programs): no grappler, so its values stay eager's."""

from __future__ import annotations

from tensorflow.python.eager import context, execute

_CONFIG: list[bytes] = []


def eager_equal_config() -> bytes:
    """The serialized config every compiled function runs with: grappler off, as in eager
    execution, which never runs it. Its passes change values: the arithmetic optimizer
    re-associates AddN (the gradient terms of a BatchNormalization input, 1 ulp off eager; a GAN
    amplifies that to 1e-3 in a dozen steps), the remapper's fused MatMul+BiasAdd+Relu turns a
    NaN into 0 where eager's Relu keeps it, and constant folding turns a division by a constant
    into a multiplication by its reciprocal (the gradient of a mean over 6 values, 1 ulp off).
    The rest gains nothing on graphs of recorded ops, and costs: 0.3-0.4 s of the first call of
    each new segment of a transformer step, about half of it."""
    if not _CONFIG:
        config = context.context().config  # a copy
        config.allow_soft_placement = True
        config.graph_options.rewrite_options.disable_meta_optimizer = True
        _CONFIG.append(config.SerializeToString())
    return _CONFIG[0]


class FunctionCall:
    """A concrete function called as one eager op by its name, its captured inputs appended,
    with the config every compiled function runs with: ``ConcreteFunction._call_flat`` minus its
    Python (no tape, no structure; 35 us less a call, which the loop's thread got back as less
    wait for the GIL: mlp-small 4% faster). Keeps the ConcreteFunction (``cf``) alive: its
    function stays registered."""

    def __init__(self, cf) -> None:
        self.cf, fn = cf, cf._inference_function
        self.name = fn.name.decode() if isinstance(fn.name, bytes) else fn.name
        self.caps = list(cf.captured_inputs)
        self.n_out = len(fn.cached_definition.signature.output_arg)
        self.attrs = ("executor_type", "", "config_proto", eager_equal_config())

    def __call__(self, *args) -> list:
        return execute.execute(self.name, self.n_out, [*args, *self.caps], self.attrs,
                               context.context())


def xla_refused(error: BaseException) -> bool:
    """Whether XLA refused to compile a segment (an op it has no kernel for), or to launch it
    (a variable on another device than its cluster's: a replica's, under MirroredStrategy):
    nothing ran."""
    text = str(error)
    return ("XLA" in text and ("unsupported operations" in text or "No registered" in text)) \
        or ("Trying to access resource" in text and "located in device" in text)
