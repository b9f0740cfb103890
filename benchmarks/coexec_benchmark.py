"""Throughput of eager, tf.function, lazy and co-execution on the same loops, in one run.

    python benchmarks/coexec_benchmark.py [--iterations N] [--warmup W] [--repeats R]
                                          [--only NAME ...] [--regions] [--cell N]
                                          [--program segments|whole] [--read every|end]
                                          [--modes MODE ...]

The ``lazy`` and ``coexec`` columns run op by op (``Terra(regions=False)``); ``--regions`` adds
``lazy+regions`` and ``coexec+regions``, which are what ``Terra()`` does by default (DESIGN 5b).
``--cell N`` prints the whole time of an N-iteration cell from fresh objects instead (time to
benefit).

Each Terra run is one loop over a list of W + N items, so Terra knows its length: it compiles what
that loop repays (``coexec/rental.py``). The default (W 10, N 60) is a short loop, whose timed
iterations still hold the compiles that repay within 70 iterations, and run interpreted what would
repay only later; ``--warmup 200 --iterations 300`` measures the steady state of a long one.

For every loop: iterations/s after warm-up for each mode (the median of R alternating rounds), the
ratios against eager, and the per-iteration breakdown of co-execution (paper Figure 6):
PythonRunner exec/stall and GraphRunner exec/stall in ms. ``tf.function`` wraps one step; where
the step holds Python that tf.function cannot run, the column says why.

The second table is the CPU budget: process CPU ms per iteration of each mode, and the best
co-execution/tf.function ratio this machine allows. Co-execution still runs the Python of every
step (a lazy iteration's Python exec time, P) on the cores the graph uses, so on C cores it needs
at least (tf.function CPU + P) / C ms per iteration: the first ``bound`` = tf.function ms / that.
Against lazy, which runs P and the graph's exec time G one after the other, co-execution gains at
most a full overlap of the two: the second ``bound`` = lazy ms / max(P, G) (mlp-large's graph is
nearly all of its step: its bound is near 1).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from terra_nb import Terra  # noqa: E402

READ = {"every": True}  # --read: the loops read the loss every step, or only after the loop


def read(loss) -> None:
    """The loop logs the step's loss (``--read every``), or keeps it for after the loop."""
    if READ["every"]:
        float(loss)
    else:
        READ["last"] = loss


def mlp_setup(width, batch, depth=2):
    keras.utils.set_random_seed(0)
    layers = [keras.Input((64,))] + [keras.layers.Dense(width, activation="relu")] * 0
    layers += [keras.layers.Dense(width, activation="relu") for _ in range(depth)]
    model = keras.Sequential(layers + [keras.layers.Dense(1)])
    opt = keras.optimizers.Adam(1e-3)
    rng = np.random.default_rng(0)
    data = [(rng.normal(size=(batch, 64)).astype("float32"),
             rng.normal(size=(batch, 1)).astype("float32")) for _ in range(8)]
    return model, opt, data


def make_mlp(width, batch, python_in_step):
    """A Keras MLP step; with ``python_in_step`` the step reads the loss and branches on it."""

    def build():
        model, opt, data = mlp_setup(width, batch)

        def step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            if python_in_step and float(np.log1p(float(loss))) > 100.0:
                print("diverging")
            return loss

        def loop_body(item):
            loss = step(*item)
            if not python_in_step:
                read(loss)  # the loop logs the loss every step (--read every)

        return data, loop_body, step

    return build


def make_penalty():
    """An MLP called on two batches a step, its weight penalty written out: each weight's
    gradient sums three terms, which a region's hit on the tape would sum in another order than
    eager's (``regions/eager_order.py``)."""

    def build():
        model, opt, data = mlp_setup(64, 32)
        pairs = [(data[i][0], data[(i + 3) % len(data)][0]) for i in range(len(data))]

        def step(a, b):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(model(a) ** 2) + tf.reduce_mean((model(b) - 1.0) ** 2)
                loss += 1e-4 * tf.add_n([tf.reduce_sum(w ** 2) for w in model.weights])
            grads = tape.gradient(loss, model.trainable_weights)
            opt.apply_gradients(zip(grads, model.trainable_weights))
            return loss

        def loop_body(item):
            read(step(*item))

        return pairs, loop_body, step

    return build


def make_functions():
    """The MLP step made of four user tf.functions (model, loss, gradient scaling, optimizer),
    the loss read every 10 steps: function calls are graph work in co-execution."""

    def build():
        model, opt, data = mlp_setup(32, 16)
        forward = tf.function(lambda x: model(x, training=True))
        loss_of = tf.function(lambda y, p: tf.reduce_mean(tf.square(p - y)))
        scale = tf.function(lambda gs: [g / (tf.norm(g) + 1.0) for g in gs])
        apply = tf.function(lambda gs: opt.apply_gradients(zip(gs, model.trainable_variables)))
        count = [0]

        def step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_of(y, forward(x))
            apply(scale(tape.gradient(loss, model.trainable_variables)))
            return loss

        def loop_body(item):
            loss = step(*item)
            count[0] += 1
            if count[0] % 10 == 0:
                float(loss)

        return data, loop_body, step

    return build


def keras_step(model, opt, loss_of):
    """A tape step of ``model`` (training mode) with ``loss_of(y, prediction)`` and ``opt``, and
    the loop body that reads its loss (``--read``): the CNN's and the attention loop's."""

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_of(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    def loop_body(item):
        read(step(*item))

    return step, loop_body


def make_cnn():
    """A Keras CNN (3 convolutions, batch 64 at 32x32, Adam), the loss read every step."""

    def build():
        keras.utils.set_random_seed(0)
        L = keras.layers
        model = keras.Sequential([
            keras.Input((32, 32, 3)), L.Conv2D(16, 3, activation="relu"), L.MaxPooling2D(),
            L.Conv2D(32, 3, activation="relu"), L.MaxPooling2D(),
            L.Conv2D(32, 3, activation="relu"), L.GlobalAveragePooling2D(), L.Dense(10)])
        opt = keras.optimizers.Adam(1e-3)
        loss_of = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        rng = np.random.default_rng(0)
        data = [(rng.normal(size=(64, 32, 32, 3)).astype("float32"),
                 rng.integers(0, 10, 64)) for _ in range(4)]
        step, loop_body = keras_step(model, opt, loss_of)
        return data, loop_body, step

    return build


def make_attention():
    """A transformer block (multi-head self-attention, layer norms, a feed-forward net; batch 16,
    32 tokens of 64, Adam): the attention loop of issue 39."""

    def build():
        keras.utils.set_random_seed(0)
        L = keras.layers
        inputs = keras.Input((32, 64))
        attended = L.MultiHeadAttention(num_heads=4, key_dim=16)(inputs, inputs)
        h = L.LayerNormalization()(inputs + attended)
        h = L.LayerNormalization()(h + L.Dense(64)(L.Dense(128, activation="relu")(h)))
        model = keras.Model(inputs, L.Dense(1)(L.GlobalAveragePooling1D()(h)))
        opt = keras.optimizers.Adam(1e-3)
        rng = np.random.default_rng(0)
        data = [(rng.normal(size=(16, 32, 64)).astype("float32"),
                 rng.normal(size=(16, 1)).astype("float32")) for _ in range(4)]
        step, loop_body = keras_step(model, opt, lambda y, p: tf.reduce_mean(tf.square(p - y)))
        return data, loop_body, step

    return build


def cell_and_head(make_cell):
    """A recurrent cell of 64 units over 32 features and a one-unit head on its state, built
    from seed 0, and their trainable variables: the GRU's and the SimpleRNN's loops."""
    keras.utils.set_random_seed(0)
    cell, head = make_cell(64), keras.layers.Dense(1)
    cell.build((None, 32))
    head.build((None, 64))
    return cell, head, cell.trainable_variables + head.trainable_variables


def make_gru():
    """A GRU cell stepped over 20 time steps in Python (batch 16, 32 features, 64 units, Adam),
    a regression head on the last state."""

    def build():
        cell, head, variables = cell_and_head(keras.layers.GRUCell)
        opt = keras.optimizers.Adam(1e-3)
        rng = np.random.default_rng(0)
        data = [(rng.normal(size=(16, 20, 32)).astype("float32"),
                 rng.normal(size=(16, 1)).astype("float32")) for _ in range(4)]

        def step(x, y):
            with tf.GradientTape() as tape:
                h = [tf.zeros((16, 64))]
                for t in range(x.shape[1]):
                    _, h = cell(x[:, t, :], h)
                loss = tf.reduce_mean(tf.square(head(h[0]) - y))
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
            return loss

        def loop_body(item):
            read(step(*item))

        return data, loop_body, step

    return build


def make_rnn(lengths):
    """A SimpleRNN step over sequences of these lengths (a Python loop over the time steps)."""

    def build():
        cell, head, variables = cell_and_head(keras.layers.SimpleRNNCell)
        opt = keras.optimizers.SGD(0.01)
        rng = np.random.default_rng(0)
        data = [rng.normal(size=(16, n, 32)).astype("float32") for n in lengths]

        def step(seq):
            with tf.GradientTape() as tape:
                h = [tf.zeros((16, 64))]
                for t in range(seq.shape[1]):  # a data-dependent Python loop
                    _, h = cell(seq[:, t, :], h)
                loss = tf.reduce_mean(tf.square(head(h[0])))
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
            return loss

        def loop_body(seq):
            read(step(seq))

        return data, loop_body, step

    return build


def make_scan(lengths):
    """A recurrence over sequences of these lengths and a variable update from its result, no
    gradient: with a length new every iteration, every trip count is new (one while loop in the
    whole program; tf.function retraces)."""

    def build():
        rng = np.random.default_rng(0)
        w = tf.Variable((rng.normal(size=(64, 64)) * 0.1).astype("float32"))
        data = [rng.normal(size=(n, 16, 64)).astype("float32") for n in lengths]

        def step(seq):
            h = tf.zeros((16, 64))
            for t in range(seq.shape[0]):  # a data-dependent Python loop
                h = tf.tanh(tf.matmul(h, w) + seq[t])
            w.assign_sub(1e-4 * tf.matmul(h, h, transpose_a=True))
            return tf.reduce_mean(h)

        def loop_body(seq):
            read(step(seq))

        return data, loop_body, step

    return build


LOOPS = {
    "mlp-xl": make_mlp(2048, 1024, python_in_step=False),
    "mlp-large": make_mlp(1024, 512, python_in_step=False),
    "mlp-python": make_mlp(256, 128, python_in_step=True),
    "mlp-small": make_mlp(32, 16, python_in_step=False),
    "mlp-functions": make_functions(),
    "mlp-penalty": make_penalty(),
    "cnn": make_cnn(),
    "attention": make_attention(),
    "gru": make_gru(),
    "rnn-varlen": make_rnn((6, 8, 10, 8)),
    "rnn-unique": make_rnn(range(4, 104)),  # a length never seen before, every iteration
    "scan-unique": make_scan(range(4, 104)),  # the same without gradient
}


def items(data, n):
    return [data[i % len(data)] for i in range(n)]


class Clock:
    """Wall and process CPU time from ``start()`` to ``stop(n)``: (iterations/s, CPU ms/it)."""

    def start(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def stop(self, n: int) -> tuple[float, float]:
        wall, cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu
        return n / wall, 1e3 * cpu / n


def time_plain(body, data, warmup, n) -> tuple[float, float]:
    timed = items(data, warmup + n)  # the same items, in the same order, in every mode
    for item in timed[:warmup]:
        body(item)
    clock = Clock()
    clock.start()
    for item in timed[warmup:]:
        body(item)
    read_last()
    return clock.stop(n)


def read_last() -> None:
    """With ``--read end``: the loop's last loss, read once it ended (timed)."""
    last = READ.pop("last", None)
    if last is not None:
        float(last)


def time_function(step, data, warmup, n) -> tuple[float, float] | str:
    fn = tf.function(step)
    timed = items(data, warmup + n)
    clock = Clock()
    try:  # the first call traces: with no warm-up (--cell) it is timed
        for i, item in enumerate(timed):
            if i == warmup:
                clock.start()
            read(fn(*item) if isinstance(item, tuple) else fn(item))
        read_last()
    except Exception as error:  # what tf.function cannot run
        return f"fails: {type(error).__name__}"
    return clock.stop(n)


def time_terra(body, data, warmup, n, mode, program="segments", regions=False):
    clock = Clock()
    program = program if mode == "coexec" else "segments"
    with Terra(mode=mode, program=program, regions=regions) as terra:
        for i, item in enumerate(terra.loop(items(data, warmup + n))):
            if i == warmup:
                clock.start()
            body(item)
        read_last()
    rate, cpu = clock.stop(n)
    ms, phases = breakdown(terra.stats[warmup:])
    return rate, cpu, ms, phases


def breakdown(stats) -> tuple[dict[str, float], dict[str, int]]:
    """Over ``stats`` (Terra's IterationStats): the mean ms per iteration of PythonRunner and
    GraphRunner exec and stall (paper Figure 6), and how many iterations were in each phase."""
    ms = {key: 1e3 * sum(getattr(s, key) for s in stats) / max(1, len(stats))
          for key in ("python_exec", "python_stall", "graph_exec", "graph_stall")}
    phases = {p: sum(s.phase == p for s in stats) for p in ("coexec", "fallback", "tracing")}
    return ms, phases


MODES = ("eager", "tf.function", "lazy", "coexec")
REGION_MODES = ("lazy+regions", "coexec+regions")  # with --regions (tape regions included)
CALL_MODES = ("lazy+calls", "coexec+calls")  # with --calls: regions of Keras calls only


def measure(build, mode: str, warmup: int, n: int, program: str = "segments"):
    """One timed run of ``mode`` on a freshly built loop: (it/s, CPU ms/it[, breakdown, phases])
    or the reason tf.function cannot run it."""
    data, body, step = build()
    if mode == "eager":
        return time_plain(body, data, warmup, n)
    if mode == "tf.function":
        return time_function(step, data, warmup, n)
    terra_mode, _, regions = mode.partition("+")
    regions = {"": False, "regions": True, "calls": "calls"}[regions]
    return time_terra(body, data, warmup, n, terra_mode, program, regions=regions)


def median_runs(build, warmup: int, n: int, repeats: int, modes: tuple,
                program: str = "segments") -> dict:
    """Per mode, the run with the median rate of ``repeats`` rounds; the modes alternate within a
    round so a slow spell of the machine hits all of them alike."""
    rounds = [{mode: measure(build, mode, warmup, n, program) for mode in modes}
              for _ in range(repeats)]
    run = {}
    for mode in modes:
        runs = [r[mode] for r in rounds]
        if isinstance(runs[0], str):
            run[mode] = runs[0]
        else:
            run[mode] = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
    return run


def _rate(r) -> float | str:
    return r if isinstance(r, str) else r[0]


def _row(name: str, run: dict, modes: tuple) -> str:
    """One loop: it/s per mode, each Terra mode's ratio to eager, tf.function and its lazy
    counterpart, and co-execution's breakdown."""
    rates = {m: _rate(run[m]) for m in modes}
    cells = [f"{r:>16}" if isinstance(r, str) else f"{r:16.1f}" for r in rates.values()]
    ratios = []
    for m in modes:
        if m.startswith("coexec"):
            lazy = rates[m.replace("coexec", "lazy")]
            f = rates["tf.function"]
            vs_f = f"{rates[m] / f:.2f}" if isinstance(f, float) else "-"
            ratios.append(f"{m}: {rates[m] / rates['eager']:.2f}x eager, {vs_f}x tf.f, "
                          f"{rates[m] / lazy:.2f}x lazy")
    parts = []
    for m in modes:
        if m.startswith("coexec"):
            ms, phases = run[m][2], run[m][3]
            parts.append(f"{m} ms/it {ms['python_exec']:.2f}/{ms['python_stall']:.2f}/"
                         f"{ms['graph_exec']:.2f}/{ms['graph_stall']:.2f} {phases}")
    return f"{name:<13} {' '.join(cells)}\n{'':13} {'; '.join(ratios)}\n{'':13} {'; '.join(parts)}"


def cell_times(args, modes: tuple) -> None:
    """Seconds for a whole ``args.cell``-iteration cell per mode (median of the rounds)."""
    print(f"{'loop':<13} " + " ".join(f"{m + ' s':>16}" for m in modes)
          + f"   ({args.cell} iterations from fresh objects)")
    for name, build in LOOPS.items():
        if args.only and name not in args.only:
            continue
        run = median_runs(build, 0, args.cell, args.repeats, modes, args.program)
        cells = [f"{'-':>16}" if isinstance(r, str) else f"{args.cell / r[0]:16.2f}"
                 for r in run.values()]
        print(f"{name:<13} {' '.join(cells)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3, help="rounds per loop; medians shown")
    parser.add_argument("--only", nargs="+", choices=sorted(LOOPS), metavar="NAME",
                        help=f"these loops only, of: {', '.join(sorted(LOOPS))}")
    parser.add_argument("--program", choices=("segments", "whole"), default="segments",
                        help="how coexec runs the graph: compiled segments or one whole program")
    parser.add_argument("--regions", action="store_true",
                        help="also lazy and coexec with regions (Terra's default; the plain "
                             "lazy and coexec columns are op by op)")
    parser.add_argument("--calls", action="store_true",
                        help="also lazy and coexec with regions of Keras calls only, no tape "
                             "regions (Terra(regions='calls'))")
    parser.add_argument("--read", choices=("every", "end"), default="every",
                        help="the loops read the loss every step (default), or only once the "
                             "loop ended (mlp-python reads it in its step, mlp-functions every "
                             "10th step, either way)")
    parser.add_argument("--modes", nargs="+", metavar="MODE",
                        help="these modes only (eager and tf.function are always run, and a "
                             "coexec mode's lazy counterpart, its ratios' baseline)")
    parser.add_argument("--cell", type=int, metavar="N",
                        help="time to benefit: the whole time of an N-iteration cell from fresh "
                             "objects (tracing and compiles included), instead of it/s")
    args = parser.parse_args()
    READ["every"] = args.read == "every"
    modes = MODES + (REGION_MODES if args.regions else ()) + (CALL_MODES if args.calls else ())
    if args.modes:
        lazy = [m.replace("coexec", "lazy") for m in args.modes if m.startswith("coexec")]
        modes = tuple(m for m in modes if m in ("eager", "tf.function", *args.modes, *lazy))
    if args.cell:
        return cell_times(args, modes)
    print(f"{'loop':<13} " + " ".join(f"{m + ' it/s':>16}" for m in modes)
          + "\n(coexec ms/it: py exec/py stall/graph exec/graph stall)")
    budgets = []
    for name, build in LOOPS.items():
        if args.only and name not in args.only:
            continue
        run = median_runs(build, args.warmup, args.iterations, args.repeats, modes, args.program)
        print(_row(name, run, modes), flush=True)
        budgets.append((name, run))
    print(f"\nCPU ms/it ({os.cpu_count()} cores) " + " ".join(f"{m:>15}" for m in modes)
          + "   bound co/tf.f, co/lazy (per lazy variant)")
    for name, run in budgets:
        cpu = {m: (r if isinstance(r, str) else r[1]) for m, r in run.items()}
        text = " ".join(f"{'-':>15}" if isinstance(c, str) else f"{c:>15.1f}" for c in cpu.values())
        bounds = [f"{lazy.replace('lazy', 'coexec')} {_bounds(run, cpu, lazy)}"
                  for lazy in modes if lazy.startswith("lazy") and not isinstance(run[lazy], str)]
        print(f"{name:<13} {' ' * 8}{text}   {', '.join(bounds) or '-'}")


def _bounds(run: dict, cpu: dict, lazy: str) -> str:
    """The best ratios co-execution can reach on this machine, from the lazy variant's breakdown
    (Python exec P, graph exec G ms/it): against tf.function, its CPU and P shared out over the
    cores (the module docstring); against lazy, which runs P and G one after the other, a full
    overlap of the two (lazy's ms/it over the larger)."""
    ms = run[lazy][2]
    over_lazy = (1e3 / run[lazy][0]) / max(ms["python_exec"], ms["graph_exec"], 1e-9)
    if isinstance(cpu["tf.function"], str):
        return f"-, {over_lazy:.2f}"
    wall = 1e3 / run["tf.function"][0]
    over_f = min(1.0, wall / ((cpu["tf.function"] + ms["python_exec"]) / os.cpu_count()))
    return f"{over_f:.2f}, {over_lazy:.2f}"


if __name__ == "__main__":
    main()
