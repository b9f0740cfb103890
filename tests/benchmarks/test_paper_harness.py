"""The paper harness runs one program in every mode and writes the issue's JSON shape (tiny
iteration counts; no time is asserted)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

ROOT = Path(__file__).resolve().parents[2]
MODES = ("eager", "function", "lazy", "coexec", "coexec_xla")
PROGRAM = "dcgan"


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """One harness run: (the JSON document, stdout, the plots directory)."""
    out = tmp_path_factory.mktemp("paper")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, "benchmarks/paper.py", "--only", PROGRAM, "--warmup", "4",
         "--iterations", "2", "--repeats", "1", "--timeout", "120",
         "--json", str(out / "paper.json"), "--plots", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads((out / "paper.json").read_text()), result.stdout, out


def test_json_has_the_issue_shape(harness):
    document, _, _ = harness
    assert [p["name"] for p in document["programs"]] == [PROGRAM]
    program = document["programs"][0]
    assert set(program["modes"]) == set(MODES)
    for mode, entry in program["modes"].items():
        assert set(entry) == {"it_s", "ratio_to_eager", "equal_to_eager", "error"}, mode
        assert entry["it_s"] is None or isinstance(entry["it_s"], float)
        assert entry["ratio_to_eager"] is None or isinstance(entry["ratio_to_eager"], float)
        assert entry["equal_to_eager"] in (True, False, None)
        assert entry["error"] is None or isinstance(entry["error"], str)
    assert program["modes"]["eager"]["ratio_to_eager"] == 1.0


def test_coexec_ran_coexecuted_and_equals_eager(harness):
    document, _, _ = harness
    program = document["programs"][0]
    coexec = program["modes"]["coexec"]
    assert coexec["error"] is None and coexec["equal_to_eager"] is True
    assert coexec["ratio_to_eager"] > 0
    detail = program["details"]["coexec"]
    # it traced (four iterations: two more while its optimizer regions form), then co-executed
    assert detail["phases"]["tracing"] >= 1
    assert detail["steady_phases"]["coexec"] == 2
    assert set(detail["breakdown_ms"]) == {"python_exec", "python_stall", "graph_exec",
                                           "graph_stall"}
    assert detail["breakdown_ms"]["graph_exec"] > 0  # the GraphRunner did the work
    # its two apply_gradients (two tapes: no model)
    assert re.match(r"\d of \d call sites formed \(2 regions\)", detail["regions"]), detail
    for mode in ("lazy", "coexec_xla"):
        assert program["details"][mode]["steady_phases"]["coexec"] == 2, mode


def test_every_mode_ran_and_was_compared(harness):
    document, _, _ = harness
    program = document["programs"][0]
    for mode in MODES:
        entry = program["modes"][mode]
        # each mode either ran and was compared with eager, or says why not
        assert entry["equal_to_eager"] is not None or entry["error"], mode
    assert program["details"]["function"]["traces"] >= 1


def test_tables_and_plots(harness):
    _, stdout, plots = harness
    assert f"| {PROGRAM} |" in stdout
    assert "tf.function coverage" in stdout and "Targets" in stdout
    for name in ("speedup.png", "breakdown.png"):
        assert (plots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
