"""Worker processes started together on loopback ports: the launch that the two-worker
``MultiWorkerMirroredStrategy`` benchmark and tests share (``multiworker_benchmark.py``,
``tests/tf/test_distribute.py``, ``tests/tf/test_readme_scale_out.py``).

    ports = free_ports(2)
    done = run_workers(lambda i: [sys.executable, "worker.py", str(i), ports_text],
                       count=2, env=env, timeout=300)
    for worker in done: ...     # subprocess.CompletedProcess: returncode, stdout, stderr

The workers of one cluster must all start before any can finish (each waits for the others at
its first collective), so they run at once, not one after another, and a worker still running
at the timeout is killed rather than left behind.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable
from pathlib import Path


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports on 127.0.0.1 that were free a moment ago (bound together, so
    the system gives out no port twice, then released for the workers to take)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def run_workers(argv: Callable[[int], list[str]], *, count: int, env: dict[str, str],
                timeout: float, cwd: str | Path | None = None
                ) -> list[subprocess.CompletedProcess]:
    """Start ``count`` processes at once, the i-th running ``argv(i)`` (text output captured),
    and wait for all of them; one still running after ``timeout`` seconds is killed and
    ``subprocess.TimeoutExpired`` is raised. Return codes are the caller's to judge."""
    workers = [subprocess.Popen(argv(i), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env, cwd=cwd) for i in range(count)]
    try:
        outs = [w.communicate(timeout=timeout) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
    return [subprocess.CompletedProcess(w.args, w.returncode, out, err)
            for w, (out, err) in zip(workers, outs)]
