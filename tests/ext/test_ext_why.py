"""Every iteration that did not co-execute says why (issue 40, item 5), in ``%terra explain``,
``%terra status`` and the ``%%terra`` summary line: the quickstart's loop learns the loop
(iterations 0-1), runs for real while its regions form (2-3: which calls), and falls back once
at a new op (with its line). Before, explain said "no fallbacks" but for that one, and status
"covered from iteration 1"."""

from __future__ import annotations

import re

from IPython.utils.capture import capture_output

SETUP = """
import numpy as np, tensorflow as tf, keras
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                          keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(0.05)
rng = np.random.default_rng(0)
x_all = rng.normal(size=(64, 4)).astype("float32")
y_all = x_all @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")
batches = [(x_all[i:i + 16], y_all[i:i + 16]) for i in range(0, 64, 16)] * 8
"""
LOOP = """for x, y in batches:
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    if float(loss) < 7.0:
        optimizer.learning_rate.assign(0.02)
"""


def test_every_traced_iteration_says_why(ip):
    ip.run_cell(SETUP)
    with capture_output() as captured:
        ip.run_cell_magic("terra", "", LOOP)
    summary = captured.stdout.strip().splitlines()[-1]
    assert re.search(r"1 fallbacks, \d+ not co-executed \(learning the loop \d+, regions "
                     r"forming \d+, fallback 1\), TraceGraph", summary), summary
    explained = str(ip.run_line_magic("terra", "explain"))
    assert "did not co-execute:" in explained
    assert re.search(r"iteration 0: tracing, learning the loop: its first iteration: every op "
                     r"is new, first at \w+ \(In \[\d+\]:\d+", explained), explained
    assert re.search(r"iterations? [\d–]+: tracing, regions forming: run for real for "
                     r"Sequential\.__call__ \(traced on its way to a region\)", explained)
    status = str(ip.run_line_magic("terra", "status"))
    assert re.search(r"traced      \d+ not co-executed \(learning the loop \d+, regions forming "
                     r"\d+, fallback 1\); %terra explain says why", status), status
    terra = ip.magics_manager.registry["TerraMagics"].runner.last
    for s in terra.stats:
        assert (s.phase == "coexec") == (s.why == ""), s
