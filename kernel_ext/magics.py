"""``TerraMagics``: the ``%%terra`` cell magic and the ``%terra`` line magic (see the package
docstring for the manual). Thin: parse, call ``cell``/``report``/``show``, return a result."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from IPython.core import magic_arguments as ma
from IPython.core.error import UsageError
from IPython.core.magic import (
    Magics,
    cell_magic,
    line_magic,
    magics_class,
    output_can_be_silenced,
)
from traitlets import Bool, CaselessStrEnum, Float, Int
from traitlets.config import Configurable

import terra_nb

from .cell import CellOptions, CellRunner, compile_cell
from .report import explanation_of, export_run, status_of
from .show import is_terminal, show_graph, show_timeline

MODES = ("coexec", "lazy", "trace", "eager")  # DESIGN.md section 3; the engine checks them too


def name_cell(shell: Any, filename: str) -> None:
    """Tell IPython which cell ``filename`` is: its tracebacks then say ``Cell In[3]`` and the
    views label the cell's ops ``In [3]:6``, as for any cell (IPython keeps this map on its
    compiler; a shell without one keeps the file name)."""
    numbers = getattr(shell.compile, "_filename_map", None)
    if isinstance(numbers, dict):
        # the running cell's own number: the newest one IPython cached (IPython 9 has counted
        # the next cell already while this one runs, IPython 8 had not)
        numbers[filename] = max(numbers.values(), default=shell.execution_count)


COMMANDS = ("status", "explain", "graph", "timeline", "export", "reset")


@magics_class
class TerraMagics(Magics, Configurable):
    """Runs notebook cells under terra-nb; settings: ``%config TerraMagics``."""

    default_mode = CaselessStrEnum(MODES, "coexec", help="mode without --mode").tag(config=True)
    viz = Bool(False, help="live view by default (--viz / --no-viz)").tag(config=True)
    max_fallbacks = Int(5, min=1, help="--max-fallbacks default").tag(config=True)
    quiet = Bool(False, help="no progress line or summary by default").tag(config=True)
    progress_interval = Float(0.5, min=0.0, help="seconds between progress updates").tag(
        config=True
    )
    cache_size = Int(32, min=1, help="cells whose TraceGraphs are kept").tag(config=True)

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self.runner = CellRunner(self.cache_size)

    @ma.magic_arguments("%terra")
    @ma.argument("--mode", choices=MODES, help="coexec | lazy | trace | eager")
    @ma.argument(
        "--viz", action=argparse.BooleanOptionalAction, default=None, help="live view of the run"
    )
    @ma.argument("--max-fallbacks", type=int, metavar="N", help="fallbacks before giving up")
    @ma.argument("--strict", action="store_true", help="a fallback after warm-up raises")
    @ma.argument("--xla", action="store_true", help="compile pure graph segments with XLA")
    @ma.argument(
        "--compile-after", type=int, metavar="N", default=2,
        help="compile a graph segment the N-th time it runs (before: its ops run eagerly)",
    )
    @ma.argument(
        "--program", choices=("segments", "whole"), default="segments",
        help="run the graph as compiled segments, or as one whole program per iteration",
    )
    @ma.argument(
        "--regions", action=argparse.BooleanOptionalAction, default=None,
        help="answer outermost Keras calls (models, losses, apply_gradients) with compiled "
        "regions (default: on, except with --program whole)",
    )
    @ma.argument(
        "--no-tapes", action="store_true",
        help="regions answer the Keras calls only, not GradientTape.gradient "
        "(Terra(regions='calls'))",
    )
    @ma.argument(
        "--shared-cores", action="store_true",
        help="let the scheduler place the loop's thread and TensorFlow's executor thread "
        "(Terra(split_cores=False); default: each on cores of its own, Linux)",
    )
    @ma.argument("--quiet", action="store_true", help="no progress line, no summary")
    @output_can_be_silenced
    @cell_magic("terra")
    def terra_cell(self, line: str, cell: str) -> Any:
        """Run the cell with its first top-level ``for``/``while`` loop under terra-nb: each
        iteration is one Terra iteration; the rest of the cell runs normally. In a cell without
        a loop, or whose loop calls ``fit``/``evaluate``/``predict``, each Keras step run eagerly
        is one iteration; with neither, the cell runs plainly, and says so. Names land in the
        user namespace as in a plain cell."""
        __tracebackhide__ = True
        options = self._options(ma.parse_argstring(self.terra_cell, line))
        python_body = self.shell.transform_cell(cell)
        try:
            compiled = compile_cell(line, cell, python_body, options, self.shell.compile.flags)
        except SyntaxError as error:  # show it as a plain cell would, without our frames
            raise error.with_traceback(None) from None
        name_cell(self.shell, compiled.filename)
        try:
            terra = self.runner.start(compiled, options)
        except terra_nb.TerraError as error:
            raise UsageError(str(error)) from None
        shell = self.shell
        return self.runner.run(compiled, terra, options, shell.user_global_ns, shell.user_ns)

    def _options(self, args: argparse.Namespace) -> CellOptions:
        fallbacks = self.max_fallbacks if args.max_fallbacks is None else args.max_fallbacks
        if fallbacks < 1:
            raise UsageError(f"--max-fallbacks must be >= 1, got {fallbacks}")
        if args.compile_after < 1:
            raise UsageError(f"--compile-after must be >= 1, got {args.compile_after}")
        if args.no_tapes and args.regions is False:
            raise UsageError("--no-tapes is about regions, which --no-regions turns off: "
                             "drop one of them")
        self.runner.cache_size = self.cache_size
        return CellOptions(
            mode=args.mode or self.default_mode.lower(),
            max_fallbacks=fallbacks,
            strict=args.strict,
            xla=args.xla,
            compile_after=args.compile_after,
            program=args.program,
            regions="calls" if args.no_tapes else args.regions,
            split_cores=not args.shared_cores,
            viz=self.viz if args.viz is None else args.viz,
            quiet=args.quiet or self.quiet,
            progress_interval=self.progress_interval,
            terminal=self.terminal,
        )

    @property
    def terminal(self) -> bool:
        """A terminal IPython (no front end for widgets or display updates)."""
        return is_terminal(self.shell)

    @ma.magic_arguments("terra")
    @ma.argument("command", nargs="?", default="status", choices=COMMANDS, help="what to do")
    @ma.argument("path", nargs="?", help="export: the directory to write the files into")
    @line_magic("terra")
    def terra_line(self, line: str) -> Any:
        """Inspect the last ``%%terra`` run: ``status`` (default), ``explain`` (fallbacks),
        ``graph`` (the TraceGraph), ``timeline``, ``export PATH`` (TraceGraph JSON + DOT and a
        Chrome trace of the runner spans into directory PATH), ``reset`` (forget cached graphs)."""
        args = ma.parse_argstring(self.terra_line, line)
        if args.command == "reset":
            print(f"terra: forgot {self.runner.reset()} cached cell graph(s)")
            return None
        if args.path is not None and args.command != "export":
            raise UsageError(f"%terra {args.command} takes no argument, got {args.path!r}")
        terra = self.runner.last
        if terra is None:
            raise UsageError("no %%terra cell has run yet in this session")
        if args.command == "status":
            return status_of(terra, self.runner.last_error)
        if args.command == "explain":
            return explanation_of(terra)
        if args.command == "graph":
            return show_graph(terra.graph, self.terminal)
        if args.command == "timeline":
            return show_timeline(terra.spans, terra.stats, self.terminal)
        if args.path is None:
            raise UsageError("%terra export needs a directory: %terra export PATH")
        return export_run(terra, Path(args.path).expanduser())
