"""A re-run cell's regions (issue 40, item 4): ``%terra explain`` and ``status`` list one row per
call site, whatever the versions (batch 8 and 16, objects made anew by the cell), hits are the
last run's, and the objects collected between runs fold into their call site's row. Before:
"6 formed, 1956 hits" after a 200-iteration re-run, and four identical Sequential rows."""

from __future__ import annotations

import re

SETUP = """
import gc
import numpy as np, tensorflow as tf, keras
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
batches = [(rng.normal(size=(8 if i % 2 else 16, 3)).astype("float32"),
            rng.normal(size=(8 if i % 2 else 16, 1)).astype("float32")) for i in range(20)]
"""
KEEP = """mlp = keras.Sequential([keras.Input((3,)), keras.layers.Dense(8, activation="relu"),
                          keras.layers.Dense(1)])
opt = keras.optimizers.SGD(1e-2)
"""
LOOP = """for x, y in batches:
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((mlp(x) - y) ** 2)
    grads = tape.gradient(loss, mlp.trainable_variables)
    opt.apply_gradients(zip(grads, mlp.trainable_variables))
"""


def _rows(explained: str) -> list[str]:
    return [line.split()[0] for line in explained.splitlines()[2:] if "  at " in line]


def test_a_rerun_cell_lists_one_row_per_call_site_and_its_own_hits(ip):
    ip.run_cell(SETUP + KEEP)
    for _ in range(3):
        assert ip.run_cell_magic("terra", "--quiet", LOOP) is None
    explained = str(ip.run_line_magic("terra", "explain"))
    rows = _rows(explained)
    assert sorted(rows) == sorted(set(rows)), explained  # one row per call site
    assert rows.count("Sequential.__call__") == 1
    model = next(line for line in explained.splitlines() if line.startswith("Sequential"))
    hits = int(model.split()[2])
    assert hits <= 20, model  # this run's 20 iterations, not the three runs'
    assert "2 versions: one per object and argument specs" in model  # batch 8 and 16
    line = explained.splitlines()[1]
    assert re.match(r"regions: \d of \d call sites formed \(\d regions\), \d+ hits \(and \d+ in "
                    r"earlier runs\)", line), line
    assert line.removeprefix("regions: ") in str(ip.run_line_magic("terra", "status"))


def test_objects_made_anew_by_each_run_fold_into_their_call_site(ip):
    ip.run_cell(SETUP)
    for _ in range(4):
        assert ip.run_cell_magic("terra", "--quiet", KEEP + LOOP) is None
        ip.run_cell("gc.collect()")
    explained = str(ip.run_line_magic("terra", "explain"))
    rows = _rows(explained)
    assert sorted(rows) == sorted(set(rows)), explained
    optimizer = next(line for line in explained.splitlines() if line.startswith("SGD"))
    assert re.search(r"\d collected objects? folded in", optimizer), optimizer
