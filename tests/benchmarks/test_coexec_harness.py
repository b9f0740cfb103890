"""The throughput harness runs the loops named by ``--only`` in every mode, and no others (tiny
iteration counts; no time is asserted)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

ROOT = Path(__file__).resolve().parents[2]
LOOPS = ("mlp-small", "scan-unique")


def test_only_takes_several_loops_and_runs_each_in_every_mode():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, "benchmarks/coexec_benchmark.py", "--only", *LOOPS, "--regions",
         "--warmup", "1", "--iterations", "2", "--repeats", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    names = re.findall(r"^([a-z][\w-]+) +\d", result.stdout, re.MULTILINE)
    # each loop twice: its throughput row and its CPU row
    assert names == [*LOOPS, *LOOPS], result.stdout
    for loop in LOOPS:
        row = next(line for line in result.stdout.splitlines() if line.startswith(loop))
        assert len(re.findall(r"\d+\.\d", row)) == 6, row  # eager, tf.function, 2 x lazy, coexec
    assert result.stdout.count("coexec+regions:") == len(LOOPS)


def test_modes_of_coexec_alone_also_run_their_lazy_baseline():
    # a coexec mode's ratio is to its lazy counterpart: --modes coexec+regions crashed with a
    # KeyError before it ran lazy+regions too
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, "benchmarks/coexec_benchmark.py", "--only", "mlp-small", "--regions",
         "--modes", "coexec+regions", "--warmup", "1", "--iterations", "2", "--repeats", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    header = result.stdout.splitlines()[0]
    assert "lazy+regions it/s" in header and "coexec+regions it/s" in header, result.stdout
    assert " lazy it/s" not in header and " coexec it/s" not in header, result.stdout
    assert "x lazy" in result.stdout, result.stdout
