"""How much a live dashboard slows a training loop: the same loop under ``Terra(mode="trace")``
with and without ``terra_nb.views.Dashboard`` subscribed, runs alternated, median seconds per
iteration compared. The target is a ratio below 1.02.

    python benchmarks/widget_overhead.py                 # inside a real IPython kernel (default):
                                                         # widget messages really go out on zmq
    python benchmarks/widget_overhead.py --in-process    # no kernel: widget messages go nowhere

Options: ``--iterations`` per run (default 300), ``--repeats`` pairs of runs (default 5),
``--interval`` seconds between dashboard redraws (default 0.3).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _setup():
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)]
    )
    x = np.random.rand(64, 16).astype("float32")
    return model, keras.optimizers.SGD(0.01), x, x.sum(axis=1, keepdims=True)


def _run(setup, iterations: int, learned, dashboard_interval: float | None):
    """One loop: seconds per iteration (mean), the dashboard's update count and the share of
    the loop's time spent in its listener."""
    import tensorflow as tf

    import terra_nb

    model, optimizer, x, y = setup
    dashboard = None
    with terra_nb.Terra(mode="trace", learned=learned) as terra:
        if dashboard_interval is not None:
            from terra_nb.views import Dashboard

            dashboard = Dashboard(interval=dashboard_interval).attach(terra)
        start = time.perf_counter()
        for step in terra.loop(range(iterations)):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x) - y) ** 2)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            if step % 4 == 0:
                loss = loss * 1.0
            float(loss)
        elapsed = time.perf_counter() - start
    stats = (0, 0.0)
    if dashboard is not None:
        stats = (dashboard.updates, dashboard.busy_seconds / elapsed)
        dashboard.close()
    return elapsed / iterations, stats, terra.learned


def measure(iterations: int = 300, repeats: int = 5, interval: float = 0.3) -> dict:
    """Alternate plain and dashboard runs (after a warm-up that learns the TraceGraph)."""
    setup = _setup()
    _, _, learned = _run(setup, 20, None, None)
    plain, dash, updates, busy = [], [], [], []
    for r in range(repeats):
        order = (None, interval) if r % 2 == 0 else (interval, None)
        for choice in order:
            seconds, (n, share), learned = _run(setup, iterations, learned, choice)
            (plain if choice is None else dash).append(seconds)
            if choice is not None:
                updates.append(n)
                busy.append(round(share * 100, 3))
    return {
        "iterations_per_run": iterations,
        "repeats": repeats,
        "interval_s": interval,
        "plain_ms_per_iteration": [round(s * 1e3, 3) for s in plain],
        "dashboard_ms_per_iteration": [round(s * 1e3, 3) for s in dash],
        "dashboard_updates_per_run": updates,
        "listener_percent_of_loop_time": busy,
        "ratio": statistics.median(dash) / statistics.median(plain),
    }


def report(result: dict, where: str) -> None:
    print(f"widget overhead ({where}):")
    for key, value in result.items():
        print(f"  {key}: {value}")
    print(f"dashboard / plain = {result['ratio']:.4f}  (target < 1.02)")


def _in_kernel(args) -> dict:
    """Run ``measure`` in a fresh IPython kernel (widget comms live) and return its result."""
    from jupyter_client.manager import start_new_kernel

    root = Path(__file__).resolve().parents[1]
    code = (
        f"import sys; sys.path[:0] = [{str(root)!r}, {str(root / 'benchmarks')!r}]\n"
        "import json, widget_overhead as w\n"
        f"print('RESULT' + json.dumps(w.measure({args.iterations}, {args.repeats}, "
        f"{args.interval})))"
    )
    manager, client = start_new_kernel(kernel_name="python3")
    try:
        out: list[str] = []

        def collect(msg):
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                out.append("\n".join(msg["content"]["traceback"]))

        reply = client.execute_interactive(code, timeout=1800, output_hook=collect)
        text = "".join(out)
        if reply["content"]["status"] != "ok" or "RESULT" not in text:
            raise RuntimeError("benchmark failed in the kernel:\n" + text)
        return json.loads(text.split("RESULT", 1)[1].strip().splitlines()[0])
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--interval", type=float, default=0.3)
    parser.add_argument("--in-process", action="store_true", help="no kernel, no live comms")
    args = parser.parse_args(argv)
    if args.in_process:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        report(measure(args.iterations, args.repeats, args.interval), "in process")
    else:
        report(_in_kernel(args), "IPython kernel, widget messages sent on zmq")
    return 0


if __name__ == "__main__":
    sys.exit(main())
