"""``%%terra`` on the training cells people write with Keras (issue 41): a cell calling
``fit(run_eagerly=True)`` co-executes each step, equal to the plain cell; an epoch loop around
``fit`` makes the steps, not the epochs, the iterations; a compiled ``fit`` and a cell with
nothing to co-execute run plainly, each with one line saying so (and no summary line)."""

from __future__ import annotations

import re

from ext_helpers import assert_same, plain_and_terra

from kernel_ext.progress import progress_text
from kernel_ext.report import text_timeline

SETUP = """
import keras, numpy as np
keras.utils.set_random_seed(0)
rng = np.random.RandomState(0)
x = rng.normal(size=(64, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1))).astype("float32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse", run_eagerly=EAGER)
"""
FIT = """
history = model.fit(x, y, batch_size=8, epochs=4, verbose=0)
losses = history.history["loss"]
weights = [w.numpy() for w in model.weights]
"""
EPOCH_LOOP = """
losses = []
for epoch in range(3):
    losses += model.fit(x, y, batch_size=8, epochs=1, verbose=0).history["loss"]
weights = [w.numpy() for w in model.weights]
"""


def _last(ip):
    return ip.magics_manager.registry["TerraMagics"].runner.last


def _summary(out: str) -> list[str]:
    return re.findall(r"^terra\[coexec\]: .*$", out, re.M)


def test_a_cell_calling_fit_run_eagerly_coexecutes_its_steps(ip, capsys):
    plain, terra_run = plain_and_terra(ip, SETUP.replace("EAGER", "True"), FIT, capsys=capsys)
    assert_same(plain, terra_run)
    terra = _last(ip)
    phases = [s.phase for s in terra.stats]
    assert len(phases) == 32 and phases[-8:] == ["coexec"] * 8, phases
    assert phases.count("coexec") >= 24
    assert terra.stats[0].label == "fit epoch 0 step 0"
    assert _summary(terra_run.out) and _summary(terra_run.out)[0].startswith(
        "terra[coexec]: 32 iterations")
    # the views name each step: the timeline's rows and the progress line
    assert text_timeline(terra.stats).splitlines()[-2].endswith("fit epoch 3 step 7")
    assert progress_text(5, "coexec", 9.0, "fit epoch 0 step 5") == \
        "terra: iteration 5 (fit epoch 0 step 5) | coexec | 9.0 it/s"


def test_an_epoch_loop_around_fit_makes_the_steps_the_iterations(ip, capsys):
    plain, terra_run = plain_and_terra(ip, SETUP.replace("EAGER", "True"), EPOCH_LOOP,
                                       capsys=capsys)
    assert_same(plain, terra_run)
    terra = _last(ip)
    assert [s.label for s in terra.stats[:9:8]] == ["fit epoch 0 step 0"] * 2  # each fit
    assert len(terra.stats) == 24 and [s.phase for s in terra.stats[-8:]] == ["coexec"] * 8


def test_a_compiled_fit_is_left_alone_with_one_line(ip, capsys):
    plain, terra_run = plain_and_terra(ip, SETUP.replace("EAGER", "False"), FIT, capsys=capsys)
    assert_same(plain, terra_run)
    notes = re.findall(r"^terra: .*$", terra_run.out, re.M)
    assert len(notes) == 1 and "compiled" in notes[0] and "left alone" in notes[0]
    assert not _summary(terra_run.out) and _last(ip).stats == ()


def test_a_cell_without_a_loop_runs_plainly_with_one_line(ip, capsys):
    plain, terra_run = plain_and_terra(ip, "import numpy as np", "a = np.ones(3)\nb = a.sum()\n",
                                       capsys=capsys)
    assert_same(plain, terra_run)
    assert re.findall(r"^terra: .*$", terra_run.out, re.M) == [
        "terra: nothing to co-execute: no loop (terra.loop, terra.step, a %%terra cell's) and "
        "no Keras step run eagerly (fit, evaluate, predict); it ran plainly"]
    assert not _summary(terra_run.out) and _last(ip).stats == ()
