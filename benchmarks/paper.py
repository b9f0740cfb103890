"""The paper's ten programs in every mode: throughput, correctness, breakdown, tables and plots.

    python benchmarks/paper.py [--quick] [--only NAME[,NAME]] [--json PATH] [--plots DIR]
                               [--warmup W] [--iterations N] [--repeats R] [--timeout S]
                               [--no-regions]

For every program (``benchmarks/programs``), one child process (``paper_measure.py``) runs the
modes eager, function (``tf.function`` of the step), lazy (``Terra(mode="lazy")``), coexec
(``Terra()``) and coexec_xla (``Terra(xla=True)``) in alternating rounds, each from the same seed.
Reported per mode: iterations/s after warm-up (median and spread over the rounds), the ratio to
eager, whether the final weights equal eager's (a mode whose weights differ is reported as wrong,
with no ratio), the error it raised; for Terra modes the PythonRunner/GraphRunner exec/stall
breakdown (paper Figure 6), tracing iterations, fallbacks and regions formed; for tf.function
the number of traces and, where it fails or differs, the reason (paper Table 1).

Where eager's own rounds end with different weights (kernels that sum in parallel, amplified
by discrete choices such as NMS: faster_rcnn), equality is judged in one more round of every mode
with TensorFlow's op determinism on, where eager repeats itself bit for bit; speed still comes
from the rounds without it.

A mode that reports nothing for ``--timeout`` seconds is a hang: its process is killed and the
remaining modes go on in a new one. Progress goes to stderr, the Markdown tables to stdout,
``--json`` writes ``{"programs": [{"name", "modes": {MODE: {"it_s", "ratio_to_eager",
"equal_to_eager", "error"}}, "details": {MODE: {...}}}], "meta": {...}}`` and ``--plots`` the
speed-up (Figure 5) and breakdown (Figure 6) PNGs.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from paper_report import MODES, eager_noise, summarise, tables  # noqa: E402
from programs import NAMES  # noqa: E402  (no TensorFlow in this process)

QUICK = {"warmup": 6, "iterations": 6, "repeats": 2, "xla_rounds": 1}
FULL = {"warmup": 10, "iterations": 20, "repeats": 3, "xla_rounds": 3}


def _to_stderr(text: str, finished: bool = False) -> None:
    print(text, file=sys.stderr, flush=True)


_report = [_to_stderr]  # where progress goes: stderr, or what ``main(report=...)`` was given


def progress(text: str, finished: bool = False) -> None:
    """One line of progress; ``finished``: a mode's round finished (a step of the run)."""
    _report[0](text, finished)


def _lines(stream, sink: queue.Queue) -> None:
    for line in stream:
        sink.put(line)
    sink.put(None)


def _child(name: str, modes: list[str], once: list[str], rounds: int, args,
           log) -> subprocess.Popen:
    env = dict(os.environ)
    root = str(HERE.parent)  # this checkout's terra_nb, whatever is installed
    env["PYTHONPATH"] = os.pathsep.join([root, str(HERE)] + [env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    command = [sys.executable, str(HERE / "paper_measure.py"), name, "--modes", ",".join(modes),
               "--rounds", str(rounds), "--warmup", str(args.warmup),
               "--iterations", str(args.iterations), "--once", ",".join(once)]
    command += ["--no-regions"] if args.no_regions else []
    command += ["--deterministic"] if getattr(args, "deterministic", False) else []
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True, env=env)


def _tail(log) -> str:
    log.seek(0)
    lines = [ln for ln in log.read().splitlines() if ln.strip()]
    return " | ".join(lines[-2:])[-300:]


def measure_program(name: str, args, label: str) -> tuple[dict[str, list[dict]], dict]:
    """Every mode's results of program ``name`` and the program's info (its FUNCTION_WHY);
    a hang or a crash ends that mode only."""
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    info: dict = {}
    pending, done = list(MODES), 0
    # coexec_xla compiles for long: --quick measures it in one round
    once = ["coexec_xla"] if args.xla_rounds < args.repeats else []
    while pending and done < args.repeats:
        modes = [m for m in pending if m not in once or not runs[m]]
        with tempfile.TemporaryFile("w+") as log:
            child = _child(name, modes, [m for m in once if m in modes], args.repeats - done,
                           args, log)
            lines: queue.Queue = queue.Queue()
            threading.Thread(target=_lines, args=(child.stdout, lines), daemon=True).start()
            before = sum(map(len, runs.values()))
            lost = _follow(child, lines, runs, info, args, label)
            if lost is None and sum(map(len, runs.values())) == before:  # died before starting
                for mode in pending:
                    runs[mode].append({"mode": mode, "error": f"error: {_tail(log)}"})
                return runs, info
            if lost is not None:  # this mode hung or took its process down: drop it
                mode, why = lost
                runs[mode].append({"mode": mode, "error": why if "died" not in why
                                   else f"{why}: {_tail(log)}"})
                pending.remove(mode)
        regular = [m for m in pending if m not in once]
        done = min(len(runs[m]) for m in regular) if regular else args.repeats
    return runs, info


def _follow(child, lines: queue.Queue, runs: dict, info: dict, args,
            label: str) -> tuple[str, str] | None:
    """Read the child's records into ``runs``; (mode, why) if a mode never finished."""
    current = None
    while True:
        try:
            line = lines.get(timeout=args.timeout)
        except queue.Empty:
            child.kill()  # our own child, by its handle
            child.wait()
            progress(f"{label}   {current}: no result in {args.timeout:.0f}s, killed")
            return current, f"timeout: no result within {args.timeout:.0f}s (hang)"
        if line is None:
            code = child.wait()
            if current is not None:
                return current, f"error: the process died (exit {code})"
            return None
        kind, _, payload = line.partition(" ")
        if kind == "PAPER-INFO":
            info.update(json.loads(payload))
        elif kind == "PAPER-START":
            current = json.loads(payload)["mode"]
            progress(f"{label}   {current} (round {json.loads(payload)['round'] + 1}) ...")
        elif kind == "PAPER-RESULT":
            record = json.loads(payload)
            runs[record["mode"]].append(record)
            progress(f"{label}   {record['mode']}: {_said(record)}", finished=True)
            current = None


def _said(record: dict) -> str:
    if "error" in record:
        return record["error"]
    text = f"{record['it_s']:.2f} it/s"
    if record.get("equal") is False:
        text += f", WRONG (max |diff| {record['max_abs_diff']:.2g})"
    return text + f" [{record['seconds']:.0f}s]"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"fewer iterations: {QUICK}")
    parser.add_argument("--only", help="comma-separated program names; default: all ten")
    parser.add_argument("--json", type=Path, help="write the results as JSON here")
    parser.add_argument("--plots", type=Path, help="write speedup.png and breakdown.png here")
    parser.add_argument("--warmup", type=int, help="iterations before timing")
    parser.add_argument("--iterations", type=int, help="timed iterations")
    parser.add_argument("--repeats", type=int, help="alternating rounds; medians shown")
    parser.add_argument("--xla-rounds", type=int, dest="xla_rounds",
                        help="rounds measuring coexec_xla: 1 or all (--repeats)")
    parser.add_argument("--no-regions", action="store_true",
                        help="lazy, coexec and coexec_xla op by op (Terra(regions=False)); "
                             "regions are on by default, as in Terra()")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds without a result after which a mode counts as hung")
    args = parser.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.names = args.only.split(",") if args.only else list(NAMES)
    for name in args.names:
        if name not in NAMES:
            parser.error(f"unknown program {name!r}; choose from {', '.join(NAMES)}")
    return args


def deterministic(args) -> argparse.Namespace:
    """``args`` for one round of every mode with TensorFlow's op determinism on."""
    return argparse.Namespace(**{**vars(args), "repeats": 1, "xla_rounds": 1,
                                 "deterministic": True})


def main(argv: list[str] | None = None, report=None) -> dict:
    """Run the harness; returns the JSON document it printed tables for. ``report(text,
    finished)`` takes the progress (default: lines on stderr); its ``start(steps)``, if it has
    one, learns how many mode rounds to expect (a notebook's progress bar)."""
    args = parse(argv)
    _report[0] = report or _to_stderr
    if hasattr(report, "start"):
        report.start(len(args.names) * len(MODES) * args.repeats)
    try:
        return _run(args, argv)
    finally:
        _report[0] = _to_stderr


def _run(args, argv) -> dict:
    started = time.perf_counter()
    programs = []
    for index, name in enumerate(args.names):
        label = f"[{index + 1}/{len(args.names)}] {name}"
        progress(f"{label}: {args.repeats} rounds of {args.warmup}+{args.iterations} iterations")
        runs, info = measure_program(name, args, label)
        checks, noise = None, eager_noise(runs)
        if noise:
            progress(f"{label}: eager's rounds differ ({noise:.2g}): one more round "
                     "with op determinism judges equality")
            checks, _ = measure_program(name, deterministic(args), label + " (op determinism)")
        programs.append(summarise(name, runs, info.get("why"), checks))
    meta = {"command": "python benchmarks/paper.py " + " ".join(argv or sys.argv[1:]),
            "warmup": args.warmup, "iterations": args.iterations, "repeats": args.repeats,
            "xla_rounds": min(args.xla_rounds, args.repeats),
            "cpus": os.cpu_count(), "seconds": round(time.perf_counter() - started, 1)}
    document = {"programs": programs, "meta": meta}
    print(tables(document))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=1) + "\n")
    if args.plots:
        from paper_plots import plot_all  # matplotlib only when plots are asked for

        for path in plot_all(document, args.plots):
            progress(f"wrote {path}")
    progress(f"done in {meta['seconds']:.0f}s")
    return document


if __name__ == "__main__":
    main()
