"""What formation's callee watch costs (``terra_nb/regions/callee_watch.py``).

The watch runs only while a call is recorded on its way to a region (its traced runs, two per
region formed), never on a hit. This times one eager call of a model with and without the watch
around it, alternating, and prints the medians and the watch's share:

    python benchmarks/callee_watch_cost.py [--repeats 15] [--only mlp resnet50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from terra_nb.regions.callee_watch import CalleeWatch  # noqa: E402


def mlp():
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
    return model, np.random.rand(16, 32).astype("float32")


def resnet50():
    model = keras.applications.ResNet50(weights=None, input_shape=(64, 64, 3), classes=10)
    return model, np.random.rand(2, 64, 64, 3).astype("float32")


MODELS = {"mlp": mlp, "resnet50": resnet50}


def timed(call, watch: bool) -> float:
    start = time.perf_counter()
    if watch:
        w = CalleeWatch()
        with w:
            result = call()
        reasons = w.finish(result)
        assert not reasons, reasons  # Keras's own call: nothing to refuse
    else:
        call()
    return time.perf_counter() - start


def measure(name: str, repeats: int) -> tuple[float, float]:
    model, x = MODELS[name]()
    x = keras.ops.convert_to_tensor(x)

    def call():
        return model(x, training=True)

    call()  # built
    plain, watched = [], []
    for _ in range(repeats):
        plain.append(timed(call, False))
        watched.append(timed(call, True))
    return statistics.median(plain), statistics.median(watched)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--only", nargs="+", choices=list(MODELS), default=list(MODELS))
    args = parser.parse_args()
    print(f"{'model':10} {'call ms':>9} {'watched ms':>11} {'watch ms':>9} {'x':>6}")
    for name in args.only:
        plain, watched = measure(name, args.repeats)
        print(f"{name:10} {plain * 1e3:9.2f} {watched * 1e3:11.2f} "
              f"{(watched - plain) * 1e3:9.2f} {watched / plain:6.2f}")


if __name__ == "__main__":
    main()
