"""tf.distribute from one process to several (issue 41), each program against the same program
run eagerly (bit for bit: values, weights, printed text), each asserting what ran.

``MirroredStrategy`` over two logical CPUs (a GPU user's path): an epoch loop over a
distributed dataset, ``strategy.run`` + ``strategy.reduce`` in a custom loop, and
``fit(run_eagerly=True)`` under the strategy. Eagerly, ``strategy.run`` runs each replica's step
in a thread of its own; its ops are traced and co-executed with the loop's
(``capture/replica_threads.py``), so they run in the graph on both devices. Then two
``MultiWorkerMirroredStrategy`` workers on 127.0.0.1, each running the custom loop under a
Terra, against the same two workers run eagerly. Each program runs in processes of its own
(logical devices are fixed when TensorFlow starts; a worker's cluster is fixed by
``TF_CONFIG``), which stop themselves after a deadline.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parents[1] / "benchmarks"))

from worker_cluster import free_ports, run_workers  # noqa: E402

SCRIPT = HERE / "distribute_programs.py"
TIMEOUT = 300  # seconds for a process; the script's own deadline is shorter


def _env() -> dict:
    """The test's own terra_nb in the child processes (a worktree, not the installed one)."""
    root = str(HERE.parents[1])
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else ""),
            "TF_CPP_MIN_LOG_LEVEL": "3"}


def _result(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def _mirrored(program: str) -> tuple[dict, dict]:
    done = subprocess.run([sys.executable, str(SCRIPT), program], capture_output=True,
                          text=True, timeout=TIMEOUT, env=_env(), cwd=HERE)
    assert done.returncode == 0, done.stderr[-4000:]
    result = _result(done.stdout)
    return result["eager"], result["coexec"]


def _assert_equal(eager: dict, coexec: dict) -> None:
    assert coexec["values"] == eager["values"]
    assert coexec["weights"] == eager["weights"]
    assert coexec["printed"] == eager["printed"]


def _replica_ops_ran_on_both_devices(coexec: dict) -> None:
    """The replicas' forward and backward ran in the graph segments, each on its device."""
    placed = {tuple(p) for p in coexec["placed"]}
    for op in ("MatMul", "ReluGrad"):
        devices = {device[-5:] for op_type, device in placed if op_type == op}
        assert devices == {"CPU:0", "CPU:1"}, sorted(placed)


def test_mirrored_epoch_loop_coexecutes_from_the_third_epoch():
    """Six epochs, no value read in the loop: the replicas' reads of the variables follow the
    graph's updates of the step before (they ran outside the Terra, and then read stale weights
    as soon as the loop co-executed); the distributed dataset's per-device datasets, new every
    epoch, run as the input pipeline (they kept the loop tracing all six epochs, with
    "no fallbacks")."""
    eager, coexec = _mirrored("epoch_loop")
    _assert_equal(eager, coexec)
    assert coexec["phases"] == ["tracing", "tracing"] + ["coexec"] * 4, coexec["explain"]
    assert coexec["explain"] == [] and coexec["notes"] == []
    _replica_ops_ran_on_both_devices(coexec)


def test_mirrored_epoch_loop_with_xla():
    """``Terra(xla=True)``: a segment whose ops span the replicas' devices runs without XLA,
    and one XLA cannot launch (a replica's variable on another device than its cluster's) runs
    compiled without it; they raised ``InvalidArgumentError: Trying to access resource ...
    located in device ...CPU:1 from device ...CPU:0`` (and the loop then hung). XLA rounds
    some sums its own way: values within 1e-6 of eager."""
    eager, coexec = _mirrored("epoch_loop_xla")
    np.testing.assert_allclose(coexec["values"], eager["values"], rtol=1e-6, atol=1e-6)
    for a, b in zip(coexec["weights"], eager["weights"]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    assert coexec["phases"] == ["tracing", "tracing"] + ["coexec"] * 4, coexec["explain"]
    _replica_ops_ran_on_both_devices(coexec)


def test_mirrored_run_and_reduce_in_a_custom_loop():
    eager, coexec = _mirrored("run_and_reduce")
    _assert_equal(eager, coexec)
    assert eager["printed"].count("step ") == 4
    assert coexec["phases"][2:] == ["coexec"] * 14, coexec["explain"]
    _replica_ops_ran_on_both_devices(coexec)


def test_mirrored_fit_run_eagerly_coexecutes_each_step():
    eager, coexec = _mirrored("fit")
    _assert_equal(eager, coexec)
    assert coexec["labels"][0] == "fit epoch 0 step 0" and len(coexec["labels"]) == 16
    assert coexec["phases"][2:] == ["coexec"] * 14, coexec["explain"]
    _replica_ops_ran_on_both_devices(coexec)


def test_a_terra_inside_strategy_run_is_a_usage_error():
    """One Terra per replica thread, interleaved at every merge_call, broke each other's
    region formation (an AttributeError from deep inside); the user is told where to open it."""
    done = subprocess.run([sys.executable, str(SCRIPT), "terra_in_replica"], capture_output=True,
                          text=True, timeout=TIMEOUT, env=_env(), cwd=HERE)
    assert done.returncode == 0, done.stderr[-4000:]
    result = _result(done.stdout)
    assert result["error"] == "TerraUsageError", result
    assert result["message"].startswith(
        "a Terra cannot be opened inside strategy.run's function (a replica's thread); open it "
        "around the loop that calls strategy.run"), result


def _two_workers(mode: str) -> list[dict]:
    """Two worker processes on loopback ports, started together, each stopped by the test's
    timeout (and by its own deadline) if the cluster never forms."""
    ports = ",".join(map(str, free_ports(2)))
    done = run_workers(lambda i: [sys.executable, str(SCRIPT), "worker", str(i), ports, mode],
                       count=2, env=_env(), timeout=TIMEOUT, cwd=HERE)
    for worker in done:
        assert worker.returncode == 0, worker.stderr[-4000:]
    return [_result(worker.stdout) for worker in done]


@pytest.mark.skipif(not hasattr(socket, "AF_INET"), reason="needs loopback TCP")
def test_two_multi_worker_mirrored_workers_coexecute_equal_to_eager():
    eager = _two_workers("eager")
    coexec = _two_workers("coexec")
    for e, c in zip(eager, coexec):
        _assert_equal(e, c)
        assert c["phases"][2:] == ["coexec"] * 14, c["explain"]
        ran = {op_type for op_type, _ in c["placed"]}
        assert {"MatMul", "ReluGrad", "AssignSubVariableOp"} <= ran, sorted(ran)
    assert eager[0]["weights"] == eager[1]["weights"]  # the workers stayed in sync
