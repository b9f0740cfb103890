"""One program in every mode, in this process: the measuring side of ``benchmarks/paper.py``.

    python benchmarks/paper_measure.py NAME [--modes eager,coexec] [--rounds 2] [--warmup 8]
                                            [--iterations 8] [--deterministic]

For each round and each mode (in the order given, so that a slow spell of the machine hits all
modes alike) it builds the program afresh from the same seed, runs ``warmup + iterations``
iterations, and prints one line ``PAPER-START {json}`` before and ``PAPER-RESULT {json}`` after
each run on stdout (the parent reads them; a run that never reports is a hang). A result holds
iterations/s after warm-up, CPU ms per iteration, the final weights against eager's (the first
eager run of this process is the reference), the error if the run raised, and for Terra modes
the runner breakdown, phases, fallbacks and regions. ``--deterministic`` turns TensorFlow's op
determinism on first (the parent's correctness check for a program whose eager runs differ).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from functools import partial
from types import ModuleType

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from coexec_benchmark import Clock, breakdown  # noqa: E402
from paper_report import MODES  # noqa: E402
from programs import load  # noqa: E402
from programs.common import step, weights  # noqa: E402

from terra_nb import Terra  # noqa: E402

TERRA_OPTIONS = {"lazy": {"mode": "lazy"}, "coexec": {}, "coexec_xla": {"xla": True}}
# Equal to eager "within float tolerance": CPU kernels are not bit-reproducible from run to run
# (eager against eager differs by ~1e-7 on faster_rcnn), compiled graphs may order sums
# differently, and Adam turns a rounding difference in a near-zero gradient into up to one
# learning rate step (bert_qa: 2e-5 on one LayerNorm beta). A frozen schedule, a random choice
# or a batch used twice moves weights by 1e-2 and more. Every report shows the largest difference.
RTOL, ATOL = 1e-3, 1e-4


def _error_text(error: BaseException) -> str:
    """The type and the telling line of an error (AutoGraph's "in user code:" errors say what
    went wrong on their last line)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    text = lines[-1] if lines[0].startswith("in user code") else lines[0]
    if not text.startswith(type(error).__name__):
        text = f"{type(error).__name__}: {text}"
    return text[:300]


def run_eager(program: ModuleType, state, warmup: int, n: int) -> dict:
    """The plain imperative loop (the baseline)."""
    clock = Clock()
    for i in range(warmup + n):
        if i == warmup:
            clock.start()
        step(program, state, i)
    rate, cpu = clock.stop(n)
    return {"it_s": rate, "cpu_ms": cpu}


def run_function(program: ModuleType, state, warmup: int, n: int) -> dict:
    """The loop with ``tf.function`` of the program's train_step. An error in the first call
    (conversion and tracing) is a failure; an error in a later call is a raise."""
    fn = tf.function(partial(program.train_step, state))
    clock = Clock()
    for i in range(warmup + n):
        if i == warmup:
            clock.start()
        try:
            step(program, state, i, train=fn)
        except Exception as error:  # what tf.function cannot run is the measurement
            kind = "fails" if i == 0 else f"raises at iteration {i}"
            return {"error": f"{kind}: {_error_text(error)}"}
    rate, cpu = clock.stop(n)
    return {"it_s": rate, "cpu_ms": cpu, "traces": fn.experimental_get_tracing_count()}


def run_terra(program: ModuleType, state, warmup: int, n: int, mode: str,
              regions: bool | None = None) -> dict:
    """The loop under ``terra_nb.Terra`` with this mode's options (regions: Terra's default
    unless False)."""
    clock = Clock()
    options = dict(TERRA_OPTIONS[mode], regions=regions)
    with Terra(**options) as terra:
        for i in terra.loop(range(warmup + n)):
            if i == warmup:
                clock.start()
            step(program, state, i)
    rate, cpu = clock.stop(n)
    stats = terra.stats
    ms, _ = breakdown(stats[warmup:])
    _, phases = breakdown(stats)
    summary = terra.regions
    return {
        "it_s": rate, "cpu_ms": cpu, "breakdown_ms": ms, "phases": phases,
        "steady_phases": breakdown(stats[warmup:])[1],
        "fallbacks": len(terra.explain()),
        "explain": [str(f) for f in terra.explain()[:3]],
        "regions": summary.line() if terra.use_regions else None,
    }


def compare(values: list[np.ndarray], reference: list[np.ndarray]) -> tuple[bool, float]:
    """(equal within RTOL/ATOL, the largest absolute difference) of two weight lists."""
    if len(values) != len(reference) or any(a.shape != b.shape for a, b in zip(values, reference)):
        return False, float("inf")
    diff = max((float(np.max(np.abs(a - b))) if a.size else 0.0
                for a, b in zip(values, reference)), default=0.0)
    equal = all(np.allclose(a, b, rtol=RTOL, atol=ATOL) for a, b in zip(values, reference))
    return equal, diff


def measure(program: ModuleType, mode: str, warmup: int, n: int, seed: int,
            regions: bool | None = None) -> tuple[dict, list]:
    """One run of ``mode`` from a fresh state: (result, final weights or [] after an error)."""
    state = program.make(seed)
    try:
        if mode == "eager":
            result = run_eager(program, state, warmup, n)
        elif mode == "function":
            result = run_function(program, state, warmup, n)
        else:
            result = run_terra(program, state, warmup, n, mode, regions)
    except Exception as error:  # an engine error is a finding, not the end of the run
        traceback.print_exc(file=sys.stderr)
        return {"error": f"error: {_error_text(error)}"}, []
    return result, ([] if "error" in result else weights(state))


def emit(kind: str, record: dict) -> None:
    print(f"PAPER-{kind} {json.dumps(record)}", flush=True)


def run(name: str, modes: list[str], rounds: int, warmup: int, n: int, seed: int = 0,
        once: tuple[str, ...] = (), regions: bool | None = None) -> None:
    """Measure ``modes`` of program ``name`` for ``rounds`` alternating rounds (the modes in
    ``once`` in the first round only)."""
    program = load(name)
    emit("INFO", {"why": program.FUNCTION_WHY})
    reference = None
    for round_ in range(rounds):
        for mode in modes:
            if round_ and mode in once:
                continue
            emit("START", {"mode": mode, "round": round_})
            t0 = time.perf_counter()
            result, final = measure(program, mode, warmup, n, seed, regions)
            if mode == "eager" and reference is None and final:
                reference = final
            if final and reference is not None:
                result["equal"], result["max_abs_diff"] = compare(final, reference)
            result.update(mode=mode, round=round_, seconds=time.perf_counter() - t0)
            emit("RESULT", result)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--once", default="", help="modes measured in the first round only")
    parser.add_argument("--deterministic", action="store_true",
                        help="TensorFlow's op determinism on (every kernel reproducible)")
    parser.add_argument("--no-regions", dest="regions", action="store_const", const=False,
                        default=None, help="Terra modes op by op (regions off)")
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}; choose from {', '.join(MODES)}")
    once = tuple(m for m in args.once.split(",") if m)
    if args.deterministic:
        tf.config.experimental.enable_op_determinism()
    run(args.name, modes, args.rounds, args.warmup, args.iterations, args.seed, once, args.regions)


if __name__ == "__main__":
    main()
