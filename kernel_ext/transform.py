"""The ``%%terra`` cell transform: a pure AST rewrite (no IPython, no TensorFlow).

The first top-level ``for`` or ``while`` loop of a cell becomes the Terra loop::

    for x, y in batches:              with TERRA:
        body                  ->          for x, y in TERRA.loop(iter(batches)):
    else:                                     body
        tail                              else:
                                              tail

    while cond:                       with TERRA:
        body                  ->          while cond:
                                              with TERRA.step():
                                                  body

A cell without a loop runs inside the Terra with no iteration of its own (``with TERRA: <cell>``):
a Keras ``fit``, ``evaluate`` or ``predict`` whose steps run eagerly makes each step one
iteration (``terra_nb/keras_steps.py``), and a cell with neither runs plainly (the Terra says
there was nothing to co-execute). So does a cell whose first top-level loop calls ``.fit(``,
``.evaluate(`` or ``.predict(`` (an epoch loop around ``fit``): its steps, not the loop's
iterations, are what repeats. Statements before and after the loop are left alone. When the
cell ends with an expression, it is assigned to ``RESULT`` instead (the magic returns it, so
IPython displays it as a plain cell would). ``iter()`` is called in the cell's own frame so
that a loop over a non-iterable raises the same ``TypeError`` at the same line as in a plain
cell.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

TERRA = "__terra__"
RESULT = "__terra_result__"


@dataclass(frozen=True, slots=True)
class CellPlan:
    """A transformed cell: the module to compile, where its Terra loop is, whether it has a
    value to display. ``loop_line`` is 0 for a cell without a Terra loop (``loop_kind``
    "cell"); ``keras_loop`` is the line of a first loop left alone because it calls Keras's
    ``fit``/``evaluate``/``predict``, else 0."""

    module: ast.Module
    loop_kind: str  # "for" | "while" | "cell"
    loop_line: int
    has_result: bool
    keras_loop: int = 0


KERAS_LOOPS = frozenset({"fit", "evaluate", "predict"})  # their steps are Terra iterations


def transform_cell(source: str, filename: str = "<terra-cell>") -> CellPlan:
    """Parse ``source`` and rewrite it for ``%%terra``. Raises ``SyntaxError``.

    Line numbers are those of ``source``: prefix it with blank lines to number it differently.
    """
    tree = ast.parse(source, filename=filename)
    body = list(tree.body)
    has_result = bool(body) and isinstance(body[-1], ast.Expr)
    if has_result:
        body[-1] = _assign_result(body[-1])
    index = _first_loop(body)
    keras_loop = 0
    if index is not None and _calls_keras_loop(body[index]):
        index, keras_loop = None, body[index].lineno
    if index is None:
        new_body = [_wrap_cell(body, tree)]
        kind, line = "cell", 0
    else:
        loop = body[index]
        kind, line = ("for" if isinstance(loop, ast.For) else "while"), loop.lineno
        body[index] = _wrap_loop(loop)
        new_body = body
    module = ast.Module(body=new_body, type_ignores=tree.type_ignores)
    ast.fix_missing_locations(module)
    return CellPlan(module, kind, line, has_result, keras_loop)


def _calls_keras_loop(loop: ast.For | ast.While) -> bool:
    """Whether the loop calls a method named ``fit``, ``evaluate`` or ``predict``."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and n.func.attr in KERAS_LOOPS for n in ast.walk(loop))


def _first_loop(body: list[ast.stmt]) -> int | None:
    for i, stmt in enumerate(body):
        if isinstance(stmt, ast.For | ast.While):
            return i
    return None


def _name(id_: str, ctx: ast.expr_context | None = None) -> ast.Name:
    return ast.Name(id=id_, ctx=ctx or ast.Load())


def _call(method: str, *args: ast.expr) -> ast.Call:
    func = ast.Attribute(value=_name(TERRA), attr=method, ctx=ast.Load())
    return ast.Call(func=func, args=list(args), keywords=[])


def _located(node: ast.AST, like: ast.AST) -> ast.AST:
    """``node`` and every node under it without a position get ``like``'s position."""
    for child in ast.walk(node):
        if "lineno" in child._attributes and not hasattr(child, "lineno"):
            ast.copy_location(child, like)
    return node


def _assign_result(stmt: ast.Expr) -> ast.Assign:
    target = _name(RESULT, ast.Store())
    return _located(ast.Assign(targets=[target], value=stmt.value), stmt)


def _with(items: list[ast.expr], body: list[ast.stmt], like: ast.AST) -> ast.With:
    node = ast.With(items=[ast.withitem(context_expr=e) for e in items], body=body)
    return _located(node, like)


def _wrap_loop(loop: ast.For | ast.While) -> ast.With:
    if isinstance(loop, ast.For):
        iterator = _located(ast.Call(func=_name("iter"), args=[loop.iter], keywords=[]), loop.iter)
        loop.iter = _located(_call("loop", iterator), loop.iter)
    else:
        loop.body = [_with([_call("step")], loop.body, loop.body[0])]
    return _with([_name(TERRA)], [loop], loop)


def _wrap_cell(body: list[ast.stmt], tree: ast.Module) -> ast.With:
    like = body[0] if body else ast.Pass(lineno=1, col_offset=0, end_lineno=1, end_col_offset=0)
    return _with([_name(TERRA)], body or [like], like)
