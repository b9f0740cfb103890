"""The user's statements around a source line: which ``if``, ``for`` or ``while`` decided between
two lines of one function. Pure functions of source text (``ast``), no TensorFlow.

A line's *chain* is the compound statements enclosing it, outermost first, each with the field
(``body``, ``orelse``, ``handlers``, ...) the line is in; the innermost element is the statement
holding the line itself, with field ``""``. Two lines run one after the other in one iteration
unless a statement on the way decided otherwise: the first statement the earlier line's chain
enters below the chains' common part is that decision (``decider``).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

BRANCHES = (ast.If,)  # a Python branch the user wrote: one case node
LOOPS = (ast.For, ast.AsyncFor, ast.While)  # a Python loop: entered or not


@dataclass(frozen=True, slots=True)
class Step:
    """One element of a chain: ``stmt`` and the field of it the line is in (``""``: the line is
    the statement itself, or its header)."""

    stmt: ast.stmt
    field: str

    def same(self, other: Step | None) -> bool:
        """The same statement and field (statements compare by identity: one parse)."""
        return other is not None and other.stmt is self.stmt and other.field == self.field


Chain = tuple[Step, ...]
AFTER = Step(ast.Pass(lineno=1 << 30, end_lineno=1 << 30), "")  # after a loop body's end


@functools.lru_cache(maxsize=64)
def parse_source(text: str) -> ast.Module | None:
    """``text`` parsed; IPython magics and shell lines (``%%terra``, ``!ls``) blanked so the line
    numbers stay the cell's. None when it does not parse."""
    lines = ["" if line.lstrip().startswith(("%", "!")) else line
             for line in text.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except (SyntaxError, ValueError):
        return None


def chain_of(tree: ast.Module, line: int) -> Chain:
    """The statements enclosing ``line`` (see the module docstring); () when none holds it."""
    out: list[Step] = []
    body: list = tree.body
    while body:
        stmt = next((s for s in body if _holds(s, line)), None)
        if stmt is None:
            break
        field, inner = _field_holding(stmt, line)
        out.append(Step(stmt, field))
        body = inner
    return tuple(out)


def _holds(node: ast.AST, line: int) -> bool:
    return node.lineno <= line <= (node.end_lineno or node.lineno)


def _field_holding(stmt: ast.stmt, line: int) -> tuple[str, list]:
    """The statement list of ``stmt`` holding ``line`` (an except handler's or a match case's
    body counts as its field), or ``("", [])``."""
    for name, value in ast.iter_fields(stmt):
        if not isinstance(value, list) or not value or not isinstance(value[0], ast.AST):
            continue
        for item in value:
            if isinstance(item, ast.stmt) and _holds(item, line):
                return name, value
            if isinstance(item, (ast.ExceptHandler, ast.match_case)):
                inner = item.body
                if inner and inner[0].lineno <= line <= (inner[-1].end_lineno or line):
                    return name, inner
    return "", []


def end_chain(chain: Chain) -> Chain:
    """The chain of the end of the loop body ``chain`` is in (the innermost loop it is inside):
    where an iteration goes when it skips the rest of the body."""
    for k in range(len(chain) - 1, -1, -1):
        if isinstance(chain[k].stmt, LOOPS) and chain[k].field == "body":
            return (*chain[: k + 1], AFTER)
    return (AFTER,)


def decider(a: Chain, b: Chain) -> ast.stmt | None:
    """The statement that sent an iteration to ``a`` or to ``b`` (two lines of one function):
    a statement whose different fields hold them, else the first ``if``/loop that the earlier
    line's chain enters below their common part (the later line's path skipped it). None when
    the lines are one statement, or nothing in the source explains the skip."""
    k = 0
    while k < len(a) and k < len(b) and a[k].same(b[k]):
        k += 1
    if k == len(a) or k == len(b):
        return None  # one holds the other: the same statement (or a header and its body)
    if a[k].stmt is b[k].stmt:
        return a[k].stmt if isinstance(a[k].stmt, BRANCHES + LOOPS) else None
    earlier = a if a[k].stmt.lineno < b[k].stmt.lineno else b
    for step in earlier[k:]:
        if isinstance(step.stmt, BRANCHES + LOOPS) and step.field:
            return step.stmt
    return None


def arm(stmt: ast.stmt, chain: Chain) -> str:
    """Which way of ``stmt`` a line's ``chain`` took: ``true``/``false`` for an ``if`` (its
    ``else`` or skipping it is false), ``loop``/``0 trips`` for a loop."""
    inside = any(s.stmt is stmt and s.field == "body" for s in chain)
    if isinstance(stmt, LOOPS):
        return "loop" if inside or any(s.stmt is stmt for s in chain) else "0 trips"
    return "true" if inside else "false"


def header(stmt: ast.stmt) -> str:
    """The header of a branch or loop, without its comment (``if float(loss) > 4.0:``)."""
    if isinstance(stmt, ast.If):
        return f"if {ast.unparse(stmt.test)}:"
    if isinstance(stmt, ast.While):
        return f"while {ast.unparse(stmt.test)}:"
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return f"for {ast.unparse(stmt.target)} in {ast.unparse(stmt.iter)}:"
    return ""
