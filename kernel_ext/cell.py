"""Running one ``%%terra`` cell in a namespace (no IPython import: the magic passes it all in).

The cell is registered in ``linecache`` under ``<terra-cell-HASH>`` (HASH of the cell body), so
tracebacks show the cell's lines, ``inspect.getsource`` works for functions defined in it, and
code locations are the same every time the same cell runs. What a run learned (the TraceGraph,
the program locations) is cached per cell body and engine options and handed to the next run of
the same cell (``Terra(learned=...)``).
"""

from __future__ import annotations

import hashlib
import linecache
import os
import sys
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, TracebackType
from typing import Any

import terra_nb

from .fresh_line import LineEnd
from .progress import DisplayHandle, Progress, StderrLine
from .report import status_of, summary_line, text_timeline
from .show import graph_listing, start_dashboard
from .transform import RESULT, TERRA, CellPlan, transform_cell

_MISSING = object()


@dataclass(frozen=True, slots=True)
class CellOptions:
    """The options of one ``%%terra`` cell (flags and config defaults resolved)."""

    mode: str
    max_fallbacks: int
    strict: bool = False
    xla: bool = False
    compile_after: int = 2
    program: str = "segments"
    regions: bool | str | None = None  # None: Terra's default; "calls": --no-tapes
    split_cores: bool = True  # False: --shared-cores
    viz: bool = False
    quiet: bool = False
    progress_interval: float = 0.5
    terminal: bool = False  # a terminal IPython: text views, progress on stderr

    @property
    def engine(self) -> tuple:
        """The options that change what the engine learns (the cache key's part)."""
        return (self.mode, self.max_fallbacks, self.strict, self.xla, self.compile_after,
                self.program, self.regions)


@dataclass(frozen=True, slots=True)
class CompiledCell:
    """A cell ready to run: its code, its plan and its cache key."""

    code: CodeType
    plan: CellPlan
    filename: str
    key: tuple


def cell_filename(body: str) -> str:
    """The stable pseudo-filename of a cell body."""
    return f"<terra-cell-{hashlib.sha1(body.encode()).hexdigest()[:12]}>"


def compile_cell(
    line: str, raw_body: str, python_body: str, options: CellOptions, flags: int = 0
) -> CompiledCell:
    """Register the cell (``%%terra line`` + ``raw_body``) in linecache and compile
    ``python_body`` (the body after IPython's input transforms), numbered from line 2."""
    filename = cell_filename(raw_body)
    text = f"%%terra {line}".rstrip() + "\n" + raw_body
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
    # IPython's transforms drop leading blank lines: put them back so lines match the cell.
    lost = _leading_blank_lines(raw_body) - _leading_blank_lines(python_body)
    plan = transform_cell("\n" * (1 + max(lost, 0)) + python_body, filename)
    code = compile(plan.module, filename, "exec", flags=flags, dont_inherit=True)
    return CompiledCell(code, plan, filename, (raw_body, *options.engine))


def _leading_blank_lines(text: str) -> int:
    count = 0
    for line in text.splitlines():
        if line.strip():
            break
        count += 1
    return count


class CellRunner:
    """Runs compiled cells, keeps the last ``Terra`` and the learned cache (LRU)."""

    def __init__(self, cache_size: int = 32) -> None:
        self.cache_size = cache_size
        self._learned: OrderedDict[tuple, Any] = OrderedDict()
        self.last: Any = None
        self.last_error: BaseException | None = None

    @property
    def cached(self) -> int:
        """How many cells' learned graphs are cached."""
        return len(self._learned)

    def reset(self) -> int:
        """Forget every cached graph; return how many there were."""
        count = len(self._learned)
        self._learned.clear()
        return count

    def start(self, cell: CompiledCell, options: CellOptions) -> Any:
        """A new ``Terra`` for ``cell``, continuing from what earlier runs of it learned.

        Raises ``TerraUsageError``/``TerraError`` for options the engine refuses.
        """
        return terra_nb.Terra(
            mode=options.mode,
            max_fallbacks=options.max_fallbacks,
            strict=options.strict,
            xla=options.xla,
            compile_after=options.compile_after,
            program=options.program,
            regions=options.regions,
            split_cores=options.split_cores,
            learned=self._learned.get(cell.key),
        )

    def run(self, cell: CompiledCell, terra: Any, options: CellOptions, glob: dict, ns: dict):
        """Run ``cell`` in ``glob``/``ns`` under ``terra``; return the cell's last value.

        Whatever the cell raises propagates; its names stay as the cell left them.
        """
        __tracebackhide__ = True
        terra.on_note = _print_note  # under the cell, as the summary line
        progress = _watch(terra, options)
        saved = ns.get(TERRA, _MISSING)
        ns[TERRA] = terra
        error: BaseException | None = None
        line = LineEnd.watch()
        try:
            exec(cell.code, glob, ns)
        except BaseException as exc:
            error = exc
            if isinstance(exc, KeyboardInterrupt):  # raised wherever the loop was: in our code
                exc.with_traceback(without_our_frames(exc.__traceback__))
            raise
        finally:
            result = _restore(ns, saved)
            if progress is not None:
                progress.close()
            self._finish(cell.key, terra, error, options, fresh=line.stop())
        return result

    def _finish(self, key: tuple, terra: Any, error: BaseException | None, options,
                fresh: bool = True) -> None:
        self.last, self.last_error = terra, error
        self._learned.pop(key, None)
        if error is None or isinstance(error, Exception):
            # An interrupt may have hit the engine mid-update: forget what that run learned.
            self._learned[key] = terra.learned
            while len(self._learned) > self.cache_size:
                self._learned.popitem(last=False)
        if not options.quiet and terra.stats:  # no iteration: the Terra's note said why
            print(("" if fresh else "\n") + summary_line(status_of(terra, error)))
            if options.viz and options.terminal:  # the views a terminal can show: text
                print(graph_listing(terra.graph))
                print(text_timeline(terra.stats))
            sys.stdout.flush()


_OURS = tuple(str(Path(m.__file__).parent) + os.sep for m in (terra_nb, sys.modules[__package__]))


def without_our_frames(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without terra-nb's own frames (the engine's and this extension's): a Ctrl-C is
    raised at the next safe point, often inside the engine, and the user should see their own
    line, as for any other error."""
    frames = []
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(_OURS):
            frames.append(tb)
        tb = tb.tb_next
    out = None
    for frame in reversed(frames):
        out = TracebackType(out, frame.tb_frame, frame.tb_lasti, frame.tb_lineno)
    return out


def _print_note(text: str) -> None:
    """What the cell's Terra left alone (a compiled ``fit``, nothing to co-execute): one line."""
    print(f"terra: {text}")
    sys.stdout.flush()


def _restore(ns: dict, saved: Any) -> Any:
    """Remove the names the transform added; return the cell's last value (or None)."""
    result = ns.pop(RESULT, None)
    if saved is _MISSING:
        ns.pop(TERRA, None)
    else:
        ns[TERRA] = saved
    return result


def _watch(terra: Any, options: CellOptions) -> Progress | None:
    """Start the live view (``--viz``) or the text progress line; None when quiet."""
    if options.quiet or (options.viz and not options.terminal and start_dashboard(terra)):
        return None
    if options.viz and options.terminal:
        print("terra: --viz in a terminal shows the text views: this progress line, then the "
              "TraceGraph listing and the per-iteration timeline after the loop")
    show = StderrLine if options.terminal else DisplayHandle
    progress = Progress(options.progress_interval, show=show)
    terra.subscribe(progress)
    return progress
