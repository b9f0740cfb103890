"""Which ``except`` clauses an exception raised at a frame chain meets (``capture/catching.py``),
read from the code's exception table: ``with`` blocks and ``finally`` clauses are passed over,
typed and bare ``except`` clauses counted, the clauses of callers included, innermost first."""

import sys

from terra_nb.capture.catching import catching, chain_here


def where(f, *args):
    """The frame chain (root first) at each call of ``mark`` while ``f`` runs: ``f`` is the
    root, as the loop's frame is."""
    chains = []

    def mark():
        chains.append(chain_here(f.__code__))

    f(mark, *args)
    return chains


def body(mark, gate):
    for _ in range(1):
        try:
            with gate:
                mark()  # 0: inside a with, inside the try
            mark()  # 1: the same try
        except (ValueError, KeyError):
            continue
        finally:
            pass
        try:
            mark()  # 2: another try (a bare except)
        except:  # noqa: E722 - a bare except is a clause too
            pass
        mark()  # 3: no try
        try:
            helper(mark)  # 4: this try, and the helper's own
        except ValueError:
            pass


def helper(mark):
    try:
        mark()
    except ZeroDivisionError:
        pass


class Gate:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_the_same_try_through_a_with_block_and_another_try_differ():
    chains = where(body, Gate())
    clauses = [catching(c) for c in chains]
    assert clauses[0] == clauses[1] and len(clauses[0]) == 1  # the with block is passed over
    assert clauses[2] != clauses[0] and len(clauses[2]) == 1
    assert clauses[3] == ()
    # the helper's clause first (called from the body), then the caller's
    assert len(clauses[4]) == 2 and len(clauses[4][0][0]) == 1 and clauses[4][1][0] == ()
    assert clauses[4][1] != clauses[0][0]


ERRORS = (ValueError,)


def clause_shapes(mark):
    try:
        mark()  # 0: an except* clause
    except* ValueError:
        pass
    try:
        mark()  # 1: a type computed by an expression
    except ERRORS[0]:
        pass
    try:
        mark()  # 2: a finally clause whose body starts with an expression is no clause
    finally:
        _ = ERRORS[0]


def test_except_star_and_computed_types_are_clauses():
    chains = where(clause_shapes)
    assert [len(catching(c)) for c in chains] == [1, 1, 0]


def twice(mark):
    helper(mark)
    helper(mark)


def test_two_calls_of_one_try_are_two_activations():
    """The same clause of the same code, reached through two calls: another activation, which
    would catch an error of the first call late."""
    first, second = (catching(c) for c in where(twice))
    assert len(first) == len(second) == 1 and first != second
    assert first[0][1:] == second[0][1:]  # the same code and handler


def finally_only(mark):
    try:
        mark()
    finally:
        pass


def test_a_finally_clause_catches_nothing():
    (chain,) = where(finally_only)
    assert catching(chain) == ()


def test_a_chain_outside_the_root_is_empty():
    assert chain_here(body.__code__) == ()
    assert chain_here(sys._getframe().f_code)[-1][0] is sys._getframe().f_code
