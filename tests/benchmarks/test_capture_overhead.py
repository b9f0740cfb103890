"""The per-op benchmark's co-execution figure and its engine part: the engine's seconds are counted
on the loop's thread only, are part of the iteration's time, and the loop really co-executed
(no time is asserted)."""

from __future__ import annotations

import gc
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import capture_overhead  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python import pywrap_tfe  # noqa: E402
from tensorflow.python.eager import execute  # noqa: E402

from terra_nb import Terra  # noqa: E402
from terra_nb.capture import hooks  # noqa: E402


def test_the_engines_part_is_counted_inside_the_co_executed_iteration():
    originals = hooks._fast_path_execute, hooks._quick_execute
    step = capture_overhead.elementwise_program()
    per_iteration, engine, share = capture_overhead.coexec_timed(step, 5)
    assert share == 1.0  # every timed iteration co-executed: no tracing timed as co-execution
    assert 0.0 < engine < per_iteration
    assert (hooks._fast_path_execute, hooks._quick_execute) == originals  # the clock is gone


def test_the_hook_clock_counts_this_threads_hooked_ops_only():
    x = tf.Variable(1.0)
    during = []
    for _ in range(3):  # placeholders of earlier tests keep the hooks until collected
        gc.collect()
    tensorflows = pywrap_tfe.TFE_Py_FastPathExecute, execute.execute
    with capture_overhead.hook_clock() as spent, Terra(regions=False) as terra:
        for i in terra.loop(range(4)):
            x.assign_add(1.0)
            if i == 3:  # hooks installed: the other thread's ops pass through them too
                before = spent[0]
                other = threading.Thread(target=lambda: [tf.add(1.0, 2.0) for _ in range(200)])
                other.start()
                other.join()
                during.append(spent[0] - before)
    assert spent[0] > 0.0  # the loop's own ops
    assert during == [0.0]
    del terra
    for _ in range(3):
        gc.collect()
    # the clocked hooks were installed, so they are what removing the hooks takes away
    assert (pywrap_tfe.TFE_Py_FastPathExecute, execute.execute) == tensorflows
