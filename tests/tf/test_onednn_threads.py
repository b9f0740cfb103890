"""oneDNN fixes its thread count for the whole process at its first primitive, from the cores the
thread making it may use (``coexec/cores.py``). A Terra keeps its loop's and its executor's
threads on cores of their own: a process whose first convolution ran inside the loop split its
filter gradient for one thread and trained a Conv2D 1 ulp away from eager from the first step
(adversarial review). Each side runs in a fresh process, where nothing made a primitive yet."""

import os
import subprocess
import sys

import pytest

PROGRAM = r"""
import sys
import numpy as np, tensorflow as tf, keras
from terra_nb import Terra

def program(loop):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8, 8, 1)),
                              keras.layers.Conv2D(3, 3, padding="same", activation="relu"),
                              keras.layers.Flatten(), keras.layers.Dense(1)])
    opt = keras.optimizers.SGD(0.01)
    rng = np.random.default_rng(12)
    grads = []
    for _ in loop(range(6)):
        a = rng.normal(size=(4, 8, 8, 1)).astype("float32")
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(a) ** 2)
        g = tape.gradient(loss, model.trainable_weights)
        opt.apply_gradients(zip(g, model.trainable_weights))
        grads.append(g[0].numpy())
    return grads

if sys.argv[1] == "eager":
    grads = program(lambda it: it)
else:
    with Terra() as terra:
        grads = program(terra.loop)
    split = terra._engine.runner.graph.cores
    print("split", split.active, sum(s.phase == "coexec" for s in terra.stats))
print("bits", b"".join(g.tobytes() for g in grads).hex())
"""


def _run(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the split needs two cores")
def test_a_first_convolution_inside_the_loop_keeps_eagers_bits():
    eager, terra = _run("eager"), _run("terra")
    active, coexecuted = terra["split"].split()
    assert active == "True" and int(coexecuted) >= 1  # the threads were split, and it co-executed
    assert terra["bits"] == eager["bits"]
