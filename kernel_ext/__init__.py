"""terra-nb in IPython/Jupyter: the ``%%terra`` and ``%terra`` magics.

Load
    ``%load_ext terra_nb`` (or ``%load_ext kernel_ext``); ``%unload_ext terra_nb`` removes the
    magics again. Loading twice is harmless. Loading imports TensorFlow without its C++
    start-up log (``quiet_tf.py``): load the extension before importing TensorFlow.

Run a training loop under terra-nb
    ::

        %%terra [--mode coexec|lazy|trace|eager] [--viz | --no-viz] [--max-fallbacks N]
                [--strict] [--xla] [--compile-after N] [--program segments|whole]
                [--regions | --no-regions] [--no-tapes] [--shared-cores] [--quiet]
        model = make_model()                  # runs normally
        for x, y in batches():                # the first top-level for/while loop:
            ...                               #   each iteration is one Terra iteration
        print("done")                         # runs normally

    A Keras ``fit``, ``evaluate`` or ``predict`` in a cell without a loop (or in an epoch loop
    around it) whose steps run eagerly (``compile(..., run_eagerly=True)``) is co-executed:
    each step is one iteration, Keras's loop, callbacks and progress bar run as written; a
    ``fit`` Keras compiled is left alone, with one line saying so. A cell with neither a loop
    nor such a step runs plainly, with one line saying there was nothing to co-execute.
    Names the cell assigns land in the user namespace exactly as in a plain cell;
    ``break``/``continue``/``else``, functions and classes defined in the cell, and tracebacks
    pointing at the cell's lines all work as usual. The last expression of the cell is
    displayed as in a plain cell. Running the same cell again (same body, same engine options)
    continues from the TraceGraph the earlier runs built.
    During a long loop one progress line (iteration, phase, iterations/s) updates in place; a
    one-line summary follows the cell. Ctrl-C (interrupt the kernel) stops the loop; the
    variables are as eager execution left them at that point.

    ``--mode``: ``coexec`` (the default) traces until an iteration is covered, then
    co-executes; ``lazy`` runs the graph only when Python reads a value (the comparison point);
    ``trace`` runs eagerly and builds the TraceGraph; ``eager`` is the untouched baseline.
    ``--regions`` (the default, except with ``--program whole``) answers the loop's outermost
    Keras calls (a model or layer call, a loss, an optimizer's ``apply_gradients``) with
    compiled regions once they run the same way twice without Python-visible effects
    and ``GradientTape.gradient`` with one compiled function once that pays (``--no-regions``
    leaves them op by op; ``--no-tapes`` leaves the tape's gradient op by op);
    ``%terra status`` and ``%terra explain`` list the regions formed, hits, misses, refusals.
    ``--viz`` shows the live dashboard of ``terra_nb.views`` (text progress without it).
    ``--quiet`` shows neither progress nor summary. ``%%terra?`` lists the options.

Inspect the last run
    ``%terra status`` (phase, iterations, fallbacks, speed; ``%terra`` alone does the same),
    ``%terra explain`` (why each fallback happened), ``%terra graph`` (the TraceGraph),
    ``%terra timeline`` (per-iteration runner time), ``%terra export DIR`` (writes
    ``tracegraph.json``, ``tracegraph.dot`` and ``timeline.json``, a Chrome trace that opens in
    Perfetto), ``%terra reset`` (forget the cached graphs). ``status``, ``explain`` and
    ``export`` return their result, e.g. ``s = %terra status``.

Settings
    ``%config TerraMagics`` lists them: ``default_mode``, ``viz``, ``max_fallbacks``, ``quiet``,
    ``progress_interval`` (seconds between progress updates), ``cache_size``.

``python -m kernel_ext.run_notebook NOTEBOOK`` executes a notebook headless in a real kernel.
"""

from __future__ import annotations

from typing import Any

_NAME = "TerraMagics"


def load_ipython_extension(ipython: Any) -> None:
    """Register the magics and their settings with ``ipython`` (once), and the text form of a
    fallback that names its cell (``In [3]:6``)."""
    from .quiet_tf import start_up_quietly

    with start_up_quietly():  # TensorFlow's C++ start-up log: not under the notebook's cell
        from .magics import TerraMagics
        from .report import pretty_fallback

    if _NAME in ipython.magics_manager.registry:
        return
    ipython.register_magics(TerraMagics(shell=ipython))  # also adds it to shell.configurables
    text = _text_formatter(ipython)
    if text is not None:
        text.for_type_by_name("terra_nb.session", "Fallback", pretty_fallback)


def _text_formatter(ipython: Any) -> Any:
    """The shell's ``text/plain`` formatter, or None (a shell without display formatters)."""
    formatters = getattr(getattr(ipython, "display_formatter", None), "formatters", {})
    return formatters.get("text/plain")


def unload_ipython_extension(ipython: Any) -> None:
    """Remove the magics and their settings; nothing of the extension stays registered."""
    magics = ipython.magics_manager.registry.pop(_NAME, None)
    if magics is None:
        return
    for table in ipython.magics_manager.magics.values():
        for name, func in list(table.items()):
            if getattr(func, "__self__", None) is magics:
                del table[name]
    ipython.configurables[:] = [c for c in ipython.configurables if c is not magics]
    text = _text_formatter(ipython)
    if text is not None:
        text.pop("terra_nb.session.Fallback", None)
