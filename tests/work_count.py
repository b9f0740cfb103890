"""Counting work instead of timing it: the Python lines a call runs in chosen files.

The project's tests never assert a time. A claim such as "one iteration of N ops costs O(N)"
is checked by counting the lines the engine's files execute (``sys.settrace``), which does not
depend on the machine's speed or load. A budget stops the count early, so a run that grows
quadratically fails at once instead of running for minutes under the tracer.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable


class OverBudget(AssertionError):
    """The call ran more lines than its budget allowed."""


def lines_run(call: Callable[[], object], files: Iterable[str] | Callable[[str], bool],
              budget: int | None = None) -> int:
    """How many lines of ``files`` (file names, or a test on a file name) ``call()`` runs;
    raises ``OverBudget`` as soon as the count passes ``budget``."""
    wanted = files if callable(files) else set(files).__contains__
    verdicts: dict[str, bool] = {}
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
            if budget is not None and count > budget:
                raise OverBudget(f"more than {budget} lines")
        return local

    def on_call(frame, event, arg):
        name = frame.f_code.co_filename
        verdict = verdicts.get(name)
        if verdict is None:
            verdict = verdicts[name] = wanted(name)
        return local if verdict else None

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        call()
    finally:
        sys.settrace(previous)
    return count


def assert_linear(count_at: Callable[[int, int | None], int], n: int, factor: int = 4,
                  slack: float = 1.25) -> tuple[int, int]:
    """``count_at(size, budget)`` at ``n`` and at ``factor * n``: the larger costs at most
    ``slack * factor`` times the smaller (work per unit of size does not grow)."""
    small = count_at(n, None)
    budget = int(small * factor * slack)
    try:
        large = count_at(factor * n, budget)
    except OverBudget:
        raise AssertionError(
            f"{factor}x the size ran over {slack * factor:.1f}x the lines of size {n} "
            f"({small} lines): the cost grows faster than the size") from None
    return small, large
