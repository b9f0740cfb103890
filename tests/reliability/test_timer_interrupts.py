"""Ctrl-C at random moments, 200 times: no hang, nothing left behind, eager's state, and the
next loop in the same process works (timer_interrupts.py runs the loops in a child process)."""

import json
import os
import subprocess
import sys
from pathlib import Path

RUNS = 200
TIMEOUT = 600  # seconds for all runs; the child ends itself on a hang of one run (60 s)


def test_timer_interrupts_at_random_moments(fault_summary):
    """A user pressing Ctrl-C at any moment gets eager's state, the loop's thread ends, and the
    next loop runs normally."""
    here = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here.parents[1]), str(here)])}
    child = subprocess.run([sys.executable, str(here / "timer_interrupts.py"), str(RUNS), "0"],
                           capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert child.returncode == 0, f"hang or crash:\n{child.stderr[-4000:]}"
    report = json.loads(child.stdout.strip().splitlines()[-1])
    counts = report["counts"]
    fault_summary.add("mlp/segments/timer_interrupt", positions=counts["runs"],
                      survived=counts["runs"] - counts["not_eager_cut"],
                      lost_or_doubled=counts["not_eager_cut"],
                      hooks_held_by_live_values=counts["hooks_held_by_live_values"])
    assert not report["failures"], "\n".join(report["failures"])
    assert counts["runs"] == RUNS
    assert counts["interrupted"] >= RUNS // 2, counts  # most interrupts landed in a loop
    assert counts["threads_left"] == counts["hooks_left"] == counts["not_eager_cut"] == 0
