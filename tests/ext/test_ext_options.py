"""%%terra options and bad usage."""

from __future__ import annotations

import sys
import types

import pytest
from ext_helpers import assert_same, plain_and_terra
from IPython.core.error import UsageError

import terra_nb

BODY = "import tensorflow as tf\nv = tf.Variable(1.0)\nfor i in range(3):\n    v.assign(v * 2.0)\n"


def last(ip):
    return ip.magics_manager.registry["TerraMagics"].runner.last


@pytest.mark.parametrize("mode", ["trace", "eager"])
def test_mode_runs_the_engine_in_that_mode(ip, mode):
    plain, terra = plain_and_terra(ip, "", BODY, f"--mode {mode}")
    assert_same(plain, terra)
    assert last(ip).mode == mode
    assert {s.phase for s in last(ip).stats} == {"tracing" if mode == "trace" else "eager"}


@pytest.mark.parametrize("mode", ["coexec", "lazy"])
def test_coexecution_modes_equal_a_plain_cell(ip, mode):
    plain, terra = plain_and_terra(ip, "", BODY, f"--mode {mode}")
    assert_same(plain, terra)
    assert last(ip).mode == mode
    assert "coexec" in {s.phase for s in last(ip).stats}  # it co-executed after warm-up


def test_engine_flags_reach_the_engine(ip):
    ip.run_cell_magic("terra", "--max-fallbacks 7 --strict --xla --compile-after 3 "
                      "--program whole --quiet", "x = 1\n")
    t = last(ip)
    assert (t.max_fallbacks, t.strict, t.xla, t.compile_after, t.program_kind) == (
        7, True, True, 3, "whole")
    ip.run_cell_magic("terra", "--quiet", "x = 1\n")
    t = last(ip)
    assert (t.max_fallbacks, t.strict, t.xla, t.compile_after, t.program_kind) == (
        5, False, False, 2, "segments")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--bogus", "unrecognized arguments: --bogus"),
        ("--mode fast", "invalid choice: 'fast'"),
        ("--max-fallbacks many", "invalid int value"),
        ("--max-fallbacks 0", "must be >= 1"),
        ("--compile-after 0", "must be >= 1"),
        ("--program one", "invalid choice: 'one'"),
        ("--mode lazy --program whole", "needs mode='coexec'"),
        ("extra words", "unrecognized arguments"),
    ],
)
def test_bad_options_are_usage_errors_and_run_nothing(ip, line, message):
    with pytest.raises(UsageError, match=message):
        ip.run_cell_magic("terra", line, "ran = True\n")
    assert "ran" not in ip.user_ns and "__terra__" not in ip.user_ns
    result = ip.run_cell(f"%%terra {line}\nran = True\n")
    assert isinstance(result.error_in_exec, UsageError)


def test_quiet_prints_no_summary(ip, capsys):
    ip.run_cell_magic("terra", "", "for i in range(2):\n    pass\n")
    out = capsys.readouterr().out
    assert out.startswith("terra[coexec]: 2 iterations in ")  # coexec is the default
    assert out.count("\n") == 1
    ip.run_cell_magic("terra", "--quiet", "for i in range(2):\n    pass\n")
    assert capsys.readouterr().out == ""


def test_viz_without_views_falls_back_to_text(ip, capsys, no_views):
    assert ip.run_cell("%%terra --viz\nfor i in range(2):\n    y = i\n").success
    out = capsys.readouterr().out
    assert "live view unavailable" in out and "terra[coexec]: 2 iterations" in out
    assert ip.user_ns["y"] == 1


def test_viz_starts_the_live_dashboard(ip, capsys, monkeypatch):
    seen = []
    views = types.ModuleType("terra_nb.views")
    views.live_dashboard = lambda terra: (seen.append(terra), terra.subscribe(seen.append))
    monkeypatch.setitem(sys.modules, "terra_nb.views", views)
    monkeypatch.setattr(terra_nb, "views", views, raising=False)
    assert ip.run_cell("%%terra --viz\nfor i in range(3):\n    y = i\n").success
    assert seen[0] is last(ip)
    assert [s.iteration for s in seen[1:]] == [0, 1, 2]
    assert ip.run_cell("%%terra --no-viz\nfor i in range(3):\n    y = i\n").success
    assert len(seen) == 4  # --no-viz: not started again


def test_failing_live_dashboard_never_breaks_the_cell(ip, capsys, monkeypatch):
    views = types.ModuleType("terra_nb.views")

    def broken(terra):
        raise RuntimeError("no widget frontend")

    views.live_dashboard = broken
    monkeypatch.setitem(sys.modules, "terra_nb.views", views)
    monkeypatch.setattr(terra_nb, "views", views, raising=False)
    ip.run_line_magic("config", "TerraMagics.viz = True")
    assert ip.run_cell("%%terra\nfor i in range(2):\n    y = i\n").success
    assert "no widget frontend" in capsys.readouterr().err
    assert ip.user_ns["y"] == 1


KERAS_LOOP = """
import keras, numpy as np, tensorflow as tf
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
opt = keras.optimizers.SGD(0.1)
x = tf.constant(np.arange(8, dtype="float32").reshape(2, 4) / 8)
for i in range(6):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(model(x) ** 2)
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                            model.trainable_variables))
w = model.trainable_variables[0].numpy()
"""


def test_regions_flag_reaches_the_engine_and_the_reports(ip, no_views):
    plain, terra = plain_and_terra(ip, "", KERAS_LOOP, "--mode eager --regions --quiet")
    assert_same(plain, terra)
    t = last(ip)
    assert t.use_regions and t.regions.hits > 0
    status = ip.run_line_magic("terra", "status")
    assert status.regions == t.regions.line() and "formed" in str(status)
    assert "Sequential.__call__" in str(ip.run_line_magic("terra", "explain"))
    ip.run_cell_magic("terra", "--mode eager --no-regions --quiet", "x = 1\n")
    assert not last(ip).use_regions and ip.run_line_magic("terra", "status").regions == ""
    ip.run_cell_magic("terra", "--quiet", "x = 1\n")
    assert last(ip).use_regions  # on by default (coexec)
    ip.run_cell_magic("terra", "--quiet --program whole", "x = 1\n")
    assert not last(ip).use_regions  # the whole program cannot run them yet


def test_tapes_are_on_with_regions_and_no_tapes_turns_them_off(ip, no_views):
    loop = KERAS_LOOP.replace("range(6)", "range(16)")
    for flags, tapes in (("--quiet", True), ("--no-tapes --quiet", False)):
        plain, terra = plain_and_terra(ip, "", loop, flags)
        assert_same(plain, terra)
        t = last(ip)
        assert t.use_regions == (True if tapes else "calls")
        # the tape's row: formed, or declined in a loop too short to repay its G
        tape_rows = [r for r in t.regions.rows if r.name == "GradientTape.gradient"]
        assert bool(tape_rows) is tapes, t.regions
        assert any(r.name == "Sequential.__call__" and r.hits for r in t.regions.rows)
    with pytest.raises(UsageError, match="--no-tapes is about regions"):
        ip.run_cell_magic("terra", "--no-tapes --no-regions --quiet", "x = 1\n")


def test_shared_cores_passes_split_cores_false(ip, no_views):
    ip.run_cell_magic("terra", "--quiet", "x = 1\n")
    assert last(ip).split_cores  # the default
    ip.run_cell_magic("terra", "--shared-cores --quiet", "x = 1\n")
    assert not last(ip).split_cores
