"""The user's loops faults are injected into, run the same way eagerly and under terra-nb.

``loop`` is the identity for eager and ``terra.loop`` under terra-nb; ``counter`` is an installed
``OpCounter``. Every position is tried from the program's initial state (``program.reset()``,
between iterations) on a pair of iterations: a clean one (batch 0), whose graph work may still
be running when the next begins, then the faulted one (batch 1). So the eager reference of every
position is one eager pair, read at every position of its second iteration (``eager_reference``).
"""

from __future__ import annotations

import signal

WARM_UP = 2  # pairs before the first fault: two traced iterations, then co-execution


class InjectedFault(Exception):
    """The user's own error, raised by the step at a chosen op."""


def raise_fault(k: int) -> None:
    raise InjectedFault(f"fault at op {k}")


def interrupt(k: int) -> None:
    """Ctrl-C at op ``k``: SIGINT through whatever handler is installed (terra-nb's defers it
    out of its own critical steps), which raises KeyboardInterrupt here."""
    signal.raise_signal(signal.SIGINT)


def at_position(fault, at: int | None):
    """A counter action running ``fault`` at position ``at`` only."""

    def action(k: int) -> None:
        if k == at:
            fault(k)

    return action


def _step(program, counter, i: int, at: int | None, fault, log: list) -> None:
    counter.action = at_position(fault, at)
    with counter.step(watched=at is not None):
        loss = program.step(i)
    log.append(float(loss))


def faults_caught_in_the_body(program, loop, counter, positions, fault, caught=()):
    """One loop over every position; an error of a type in ``caught`` is caught in the loop
    body and the loop goes on. Returns ``{k: (Python values of the pair, state after it)}``."""
    log, results = [], {}

    def pairs():
        for k in [None] * WARM_UP + list(positions):
            program.reset()
            start = len(log)
            yield 0, None
            yield 1, k
            if k is not None:
                results[k] = (log[start:], program.state())

    for i, at in loop(pairs()):
        try:
            _step(program, counter, i, at, fault, log)
        except caught as error:
            log.append(type(error).__name__)
    return results


def faults_caught_outside(program, loop, counter, positions, fault, caught):
    """One loop per position: the error (a type in ``caught``) leaves the loop and the user
    catches it around it. Returns ``{k: (Python values, state after the cut)}``."""
    for _ in range(WARM_UP):
        program.reset()
        _pair(program, loop, counter, None, fault, [])
    results = {}
    for k in positions:
        program.reset()
        log: list = []
        try:
            _pair(program, loop, counter, k, fault, log)
        except caught as error:
            log.append(type(error).__name__)
        results[k] = (log, program.state())
    return results


def _pair(program, loop, counter, at: int | None, fault, log: list) -> None:
    for i in loop(range(2)):
        _step(program, counter, i, at if i == 1 else None, fault, log)


def eager_reference(program, counter) -> tuple[list[float], dict[int, list]]:
    """One eager pair from the initial state: its two losses and the state at every position
    of its second iteration (``len(states) - 1`` is the position after the last op)."""
    program.reset()
    log: list[float] = []
    states: dict[int, list] = {}
    _step(program, counter, 0, None, None, log)
    counter.action = lambda k: states.__setitem__(k, program.state())
    with counter.step():  # the loss read after the step, as ``_step`` reads it
        loss = program.step(1)
    log.append(float(loss))
    return log, states
