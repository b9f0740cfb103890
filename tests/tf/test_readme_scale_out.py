"""The README's two-worker example runs as written (issue 41): extracted from the README, on two
free loopback ports instead of its 12345 and 12346, started as the README says (one process per
worker), each stopped by the test's timeout. Both workers print the same losses, and each
co-executes from its third epoch."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from worker_cluster import free_ports, run_workers  # noqa: E402

MARK = "<!-- scale-out example"
TIMEOUT = 300


def _example() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("```python\n", text.index(MARK)) + len("```python\n")
    return text[start:text.index("```", start)]


def test_the_readme_two_worker_example_runs_as_written(tmp_path):
    source = _example()
    assert "127.0.0.1:12345" in source and "127.0.0.1:12346" in source
    a, b = free_ports(2)
    script = tmp_path / "train.py"
    script.write_text(source.replace("12345", str(a)).replace("12346", str(b)))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = run_workers(lambda i: [sys.executable, str(script), str(i)], count=2, env=env,
                       timeout=TIMEOUT, cwd=tmp_path)
    for worker in done:
        assert worker.returncode == 0, worker.stderr[-3000:]
    outs = [worker.stdout for worker in done]
    losses = [re.findall(r"epoch (\d): loss ([\d.]+)", out) for out in outs]
    assert len(losses[0]) == 5 and losses[0] == losses[1], outs
    for i, out in enumerate(outs):
        assert f"worker {i}: ['tracing', 'tracing', 'coexec', 'coexec', 'coexec']" in out, out
