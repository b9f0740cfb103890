"""Throughput of eager, tf.function, lazy and co-execution on the same loops, in one run.

    python benchmarks/coexec_benchmark.py [--iterations N] [--warmup W] [--repeats R] [--only NAME]

For every loop: iterations/s after warm-up for each mode (the median of R alternating rounds), the
ratios against eager, and the per-iteration breakdown of co-execution (paper Figure 6):
PythonRunner exec/stall and GraphRunner exec/stall in ms. ``tf.function`` wraps one step; where
the step holds Python that tf.function cannot run, the column says why.

The second table is the CPU budget: process CPU ms per iteration of each mode, and the best
co-execution/tf.function ratio this machine allows. Co-execution still runs the Python of every
step (a lazy iteration's Python exec time, P) on the cores the graph uses, so on C cores it needs
at least (tf.function CPU + P) / C ms per iteration: ``bound`` = tf.function ms / that.
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
                float(loss)  # the loop logs the loss every step

        return data, loop_body, step

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


def make_rnn(lengths):
    """A SimpleRNN step over sequences of these lengths (a Python loop over the time steps)."""

    def build():
        keras.utils.set_random_seed(0)
        cell = keras.layers.SimpleRNNCell(64)
        head = keras.layers.Dense(1)
        cell.build((None, 32))
        head.build((None, 64))
        variables = cell.trainable_variables + head.trainable_variables
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
            float(step(seq))

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
            float(step(seq))

        return data, loop_body, step

    return build


LOOPS = {
    "mlp-xl": make_mlp(2048, 1024, python_in_step=False),
    "mlp-large": make_mlp(1024, 512, python_in_step=False),
    "mlp-python": make_mlp(256, 128, python_in_step=True),
    "mlp-small": make_mlp(32, 16, python_in_step=False),
    "mlp-functions": make_functions(),
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
    return clock.stop(n)


def time_function(step, data, warmup, n) -> tuple[float, float] | str:
    fn = tf.function(step)
    timed = items(data, warmup + n)
    try:
        for item in timed[:warmup]:
            float(fn(*item) if isinstance(item, tuple) else fn(item))
    except Exception as error:  # what tf.function cannot run
        return f"fails: {type(error).__name__}"
    clock = Clock()
    clock.start()
    for item in timed[warmup:]:
        float(fn(*item) if isinstance(item, tuple) else fn(item))
    return clock.stop(n)


def time_terra(body, data, warmup, n, mode, program="segments"):
    clock = Clock()
    with Terra(mode=mode, program=program if mode == "coexec" else "segments") as terra:
        for i, item in enumerate(terra.loop(items(data, warmup + n))):
            if i == warmup:
                clock.start()
            body(item)
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


def measure(build, mode: str, warmup: int, n: int, program: str = "segments"):
    """One timed run of ``mode`` on a freshly built loop: (it/s, CPU ms/it[, breakdown, phases])
    or the reason tf.function cannot run it."""
    data, body, step = build()
    if mode == "eager":
        return time_plain(body, data, warmup, n)
    if mode == "tf.function":
        return time_function(step, data, warmup, n)
    return time_terra(body, data, warmup, n, mode, program)


def median_runs(build, warmup: int, n: int, repeats: int, program: str = "segments") -> dict:
    """Per mode, the run with the median rate of ``repeats`` rounds; the modes alternate within a
    round so a slow spell of the machine hits all of them alike."""
    rounds = [{mode: measure(build, mode, warmup, n, program) for mode in MODES}
              for _ in range(repeats)]
    run = {}
    for mode in MODES:
        runs = [r[mode] for r in rounds]
        if isinstance(runs[0], str):
            run[mode] = runs[0]
        else:
            run[mode] = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3, help="rounds per loop; medians shown")
    parser.add_argument("--only", choices=sorted(LOOPS))
    parser.add_argument("--program", choices=("segments", "whole"), default="segments",
                        help="how coexec runs the graph: compiled segments or one whole program")
    args = parser.parse_args()
    print(f"{'loop':<13} {'eager it/s':>10} {'tf.function':>16} {'lazy':>8} {'coexec':>8} "
          f"{'co/eager':>8} {'co/tf.f':>7} {'co/lazy':>7}   coexec ms/it: py exec, py stall, "
          f"graph exec, graph stall")
    budgets = []
    for name, build in LOOPS.items():
        if args.only and name != args.only:
            continue
        run = median_runs(build, args.warmup, args.iterations, args.repeats, args.program)
        eager, function, lazy, coexec = (r if isinstance(r, str) else r[0] for r in run.values())
        ms, phases = run["coexec"][2], run["coexec"][3]
        f_text = f"{function:16.1f}" if isinstance(function, float) else f"{function:>16}"
        vs_f = f"{coexec / function:7.2f}" if isinstance(function, float) else f"{'-':>7}"
        print(f"{name:<13} {eager:10.1f} {f_text} {lazy:8.1f} {coexec:8.1f} "
              f"{coexec / eager:8.2f} {vs_f} {coexec / lazy:7.2f}   "
              f"{ms['python_exec']:.2f}, {ms['python_stall']:.2f}, {ms['graph_exec']:.2f}, "
              f"{ms['graph_stall']:.2f}  {phases}", flush=True)
        budgets.append((name, run))
    print(f"\nCPU ms/it ({os.cpu_count()} cores)  eager  tf.function  lazy  coexec   lazy py exec"
          f"   bound co/tf.f")
    for name, run in budgets:
        cpu = {m: (r if isinstance(r, str) else r[1]) for m, r in run.items()}
        python = run["lazy"][2]["python_exec"]
        text = " ".join(f"{'-':>11}" if isinstance(c, str) else f"{c:>11.1f}" for c in cpu.values())
        bound = "-"
        if not isinstance(cpu["tf.function"], str):
            wall = 1e3 / run["tf.function"][0]
            bound = f"{min(1.0, wall / ((cpu['tf.function'] + python) / os.cpu_count())):.2f}"
        print(f"{name:<13} {text} {python:14.1f} {bound:>17}")


if __name__ == "__main__":
    main()
