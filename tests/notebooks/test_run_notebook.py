"""The headless runner (``python -m kernel_ext.run_notebook``) prints what a cell writes once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[2]
CELL = """import os, sys, time
os.write(2, b"written by C code\\n")   # as TensorFlow's C++ log writes
time.sleep(1)                           # the kernel forwards such output from a thread
print("written by Python", file=sys.stderr)
print("log level", os.environ.get("TF_CPP_MIN_LOG_LEVEL"))"""


def test_each_line_a_cell_writes_is_printed_once(tmp_path):
    """The kernel copies its streams into the cell's outputs and onto its own terminal; the
    runner prints the outputs and sends that terminal to a log, so nothing shows twice. The
    kernel starts with TensorFlow's C++ log off."""
    book = tmp_path / "streams.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(CELL)]), book)
    # ipykernel forwards C-level output only outside pytest (PYTEST_CURRENT_TEST)
    hidden = ("TF_CPP_MIN_LOG_LEVEL", "PYTEST_CURRENT_TEST")
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    done = subprocess.run(
        [sys.executable, "-m", "kernel_ext.run_notebook", str(book), "--out", str(tmp_path)],
        env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300,
    )
    shown = done.stdout + done.stderr
    assert done.returncode == 0, shown
    assert shown.count("written by C code") == 1 and shown.count("written by Python") == 1
    assert "log level 3" in shown
    assert "written by C code" in (tmp_path / "streams.kernel.log").read_text()
