"""Keras ``fit`` three ways: eagerly (``run_eagerly=True``), the same eager ``fit`` under a
Terra (each step co-executed, regions on: what ``%%terra`` does), and compiled by Keras
(``run_eagerly=False``), on the co-execution benchmark's MLP and CNN.

    python benchmarks/fit_benchmark.py [--only mlp cnn] [--warmup W] [--steps N]
                                       [--repeats R] [--verbose]

Each run builds the model afresh and calls ``fit`` once for W + N steps (``steps_per_epoch``
steps an epoch, the data cycling); a callback stamps the end of every step. Steps/s is N over
the time of the last N steps: the steady state after the warm-up (tracing, regions forming,
compiles). ``whole s`` is the whole ``fit`` call from a fresh model: the time to benefit. The
modes alternate within each of R rounds; the table shows medians. ``equal`` says whether the
co-executed fit's weights equal the eager fit's bit for bit (same seed, same data).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from terra_nb import Terra  # noqa: E402

MODES = ("eager fit", "terra fit", "compiled fit")


def mlp(batch: int = 16, width: int = 32):
    """coexec_benchmark's mlp-small: 64 features, two Dense(width) + Dense(1), Adam, MSE."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(width, activation="relu"),
                              keras.layers.Dense(width, activation="relu"),
                              keras.layers.Dense(1)])
    rng = np.random.default_rng(0)
    n = batch * 64  # an epoch of 64 steps (tf.data's iterator costs ~30 ms an epoch)
    data = (rng.normal(size=(n, 64)).astype("float32"), rng.normal(size=(n, 1)).astype("float32"))
    return model, keras.optimizers.Adam(1e-3), "mse", data, batch


def cnn(batch: int = 64):
    """coexec_benchmark's cnn: three convolutions at 32x32, batch 64, Adam, sparse CE."""
    keras.utils.set_random_seed(0)
    L = keras.layers  # noqa: N806
    model = keras.Sequential([
        keras.Input((32, 32, 3)), L.Conv2D(16, 3, activation="relu"), L.MaxPooling2D(),
        L.Conv2D(32, 3, activation="relu"), L.MaxPooling2D(),
        L.Conv2D(32, 3, activation="relu"), L.GlobalAveragePooling2D(), L.Dense(10)])
    rng = np.random.default_rng(0)
    n = batch * 16
    data = (rng.normal(size=(n, 32, 32, 3)).astype("float32"), rng.integers(0, 10, n))
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return model, keras.optimizers.Adam(1e-3), loss, data, batch


MODELS = {"mlp": mlp, "cnn": cnn}


class StepClock(keras.callbacks.Callback):
    """The end time of every training step."""

    def __init__(self) -> None:
        super().__init__()
        self.ends: list[float] = []

    def on_train_batch_end(self, batch, logs=None) -> None:
        self.ends.append(time.perf_counter())


def run(make, mode: str, warmup: int, steps: int, verbose: int) -> dict:
    """One fresh ``fit`` of ``warmup + steps`` steps in ``mode``."""
    model, optimizer, loss, (x, y), batch = make()
    model.compile(optimizer=optimizer, loss=loss, run_eagerly=mode != "compiled fit")
    per_epoch = len(x) // batch
    total = warmup + steps
    epochs = -(-total // per_epoch)
    clock = StepClock()
    start = time.perf_counter()
    kwargs = dict(batch_size=batch, epochs=epochs, verbose=verbose, callbacks=[clock],
                  shuffle=False)
    if mode == "terra fit":
        with Terra() as terra:
            model.fit(x, y, **kwargs)
        phases = [s.phase for s in terra.stats]
        share = phases.count("coexec") / len(phases)
    else:
        model.fit(x, y, **kwargs)
        share = None
    whole = time.perf_counter() - start
    ends = clock.ends[warmup - 1:total]
    rate = (len(ends) - 1) / (ends[-1] - ends[0])
    return {"rate": rate, "whole": whole, "share": share,
            "weights": [w.numpy() for w in model.weights]}


def measure(make, warmup: int, steps: int, repeats: int, verbose: int) -> dict:
    """Medians of ``repeats`` rounds, the modes alternating within each round."""
    runs: dict[str, list[dict]] = {m: [] for m in MODES}
    for r in range(repeats):
        order = MODES if r % 2 == 0 else MODES[::-1]
        for mode in order:
            runs[mode].append(run(make, mode, warmup, steps, verbose))
    equal = all(np.array_equal(a, b) for a, b in zip(runs["eager fit"][0]["weights"],
                                                     runs["terra fit"][0]["weights"]))
    return {"rate": {m: statistics.median(r["rate"] for r in runs[m]) for m in MODES},
            "whole": {m: statistics.median(r["whole"] for r in runs[m]) for m in MODES},
            "share": statistics.median(r["share"] for r in runs["terra fit"]), "equal": equal}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--warmup", type=int, default=20, help="steps before the timing")
    parser.add_argument("--steps", type=int, default=200, help="timed steps")
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds")
    parser.add_argument("--verbose", action="store_true", help="fit's progress bar on")
    args = parser.parse_args()
    print(f"fit: {args.warmup} warm-up + {args.steps} timed steps, medians of {args.repeats} "
          f"alternating rounds; steps/s of the timed steps, whole fit in s")
    print(f"{'model':<6}" + "".join(f"{m + ' st/s':>18}" for m in MODES)
          + f"{'terra/eager':>13}{'terra/compiled':>16}" + "".join(
              f"{m + ' s':>15}" for m in MODES) + f"{'coexec':>8}{'equal':>7}")
    for name in args.only:
        res = measure(MODELS[name], args.warmup, args.steps, args.repeats, int(args.verbose))
        rate, whole = res["rate"], res["whole"]
        print(f"{name:<6}" + "".join(f"{rate[m]:>18.1f}" for m in MODES)
              + f"{rate['terra fit'] / rate['eager fit']:>13.2f}"
              + f"{rate['terra fit'] / rate['compiled fit']:>16.2f}"
              + "".join(f"{whole[m]:>15.2f}" for m in MODES)
              + f"{res['share']:>8.0%}{str(res['equal']):>7}", flush=True)


if __name__ == "__main__":
    main()
