"""A small built-in layered layout, used when the Graphviz ``dot`` binary is missing.

Each region (the top level, an open loop's body) is laid out on its own: items are ranked by
longest path from the region's start, placed left to right within a rank, and an open loop is a
box holding its body's layout. Elements keep the ids and ``terra-*`` classes of the DOT layout,
so the widgets' highlighting and details work on either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape

from ..trace.dot import endpoint, loop_text
from ..trace.tracegraph import TraceGraph
from .graph_model import ViewPlan
from .graph_regions import COLORS, region_title

REGION_LINES = 40  # op types listed in an open region's box

NODE_H, GAP_X, GAP_Y, PAD, CHAR_W = 34, 18, 26, 14, 6.2


@dataclass
class _Box:
    """A laid-out region: its size and the SVG fragments positioned relative to its origin."""

    width: float = 0.0
    height: float = 0.0
    parts: list[str] = field(default_factory=list)


def fallback_svg(
    g: TraceGraph, plan: ViewPlan, marks: dict[str, list[str]], note: str = ""
) -> str:
    """An SVG of ``plan`` without Graphviz: same element ids and classes, simpler geometry;
    ``note`` (why) in red above it."""
    box = _layout_region(g, plan, -1, marks)
    top = 18 if note else 0
    w, h = max(box.width, len(note) * CHAR_W) + 2 * PAD, box.height + 2 * PAD + top
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0f}pt" height="{h:.0f}pt" '
        f'viewBox="0 0 {w:.0f} {h:.0f}" class="terra-fallback-layout">'
        '<defs><marker id="terra-arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0L10,5L0,10z" '
        'fill="#868e96"/></marker></defs>'
        + (f'<text x="{PAD}" y="14" font-size="10" fill="#c92a2a">{escape(note)}</text>'
           if note else "")
        + f'<g id="graph0" class="graph" transform="translate({PAD},{PAD + top})">'
        + "".join(box.parts)
        + "</g></svg>"
    )


def _items(g: TraceGraph, plan: ViewPlan, parent: int) -> list[str]:
    keys: list[str] = []
    for n in g.region(parent):
        key = _item_of(g, plan, n.id)
        if key not in keys:
            keys.append(key)
        keys += [case for case, (_, shown) in plan.cases.items() if shown[0] == n.id]
    return keys


def _item_of(g: TraceGraph, plan: ViewPlan, node_id: int) -> str:
    key = plan.key_of[node_id]
    return f"cluster_{node_id}" if g.nodes[node_id].kind == "loop" and key[0] == "n" else key


def _item_edges(g: TraceGraph, plan: ViewPlan, parent: int) -> list[tuple[str, str, str, str]]:
    """``(item, item, edge tail key, edge head key)`` of the region's edges between items, a
    user's branch drawn through its case item."""
    through = {(b, s): case for case, (site, _) in plan.cases.items() for b, s, _ in site.arms}
    out = []
    for n in g.region(parent):
        a = _item_of(g, plan, n.id)
        for s in g.successors(n.id):
            b = _item_of(g, plan, s)
            src, dst = plan.key_of[endpoint(g, n.id, 1)], plan.key_of[endpoint(g, s, 0)]
            case = through.get((n.id, s))
            hops = [(a, case, src, case), (case, b, case, dst)] if case else [(a, b, src, dst)]
            out += [hop for hop in hops if hop[0] != hop[1] and hop not in out]
    return out


def _ranks(g: TraceGraph, plan: ViewPlan, parent: int, keys: list[str]) -> dict[str, int]:
    """Longest-path rank of every item (items come in topological order)."""
    rank = {k: 0 for k in keys}
    for a, b, _, _ in _item_edges(g, plan, parent):
        rank[b] = max(rank[b], rank[a] + 1)
    return rank


def _layout_region(g: TraceGraph, plan: ViewPlan, parent: int, marks) -> _Box:
    keys = _items(g, plan, parent)
    rank = _ranks(g, plan, parent, keys)
    sized = {k: _item_box(g, plan, k, marks) for k in keys}
    rows: dict[int, list[str]] = {}
    for k in keys:
        rows.setdefault(rank[k], []).append(k)
    pos: dict[str, tuple[float, float]] = {}
    box = _Box()
    y = 0.0
    for r in sorted(rows):
        row_w = sum(sized[k].width for k in rows[r]) + GAP_X * (len(rows[r]) - 1)
        row_h = max(sized[k].height for k in rows[r])
        box.width = max(box.width, row_w)
        x = -row_w / 2
        for k in rows[r]:
            pos[k] = (x, y)
            x += sized[k].width + GAP_X
        y += row_h + GAP_Y
    box.height = max(y - GAP_Y, 0.0)
    shift = box.width / 2
    for k in keys:
        x, y0 = pos[k]
        pos[k] = (x + shift, y0)
        box.parts.append(f'<g transform="translate({x + shift:.1f},{y0:.1f})">')
        box.parts += sized[k].parts
        box.parts.append("</g>")
    box.parts[:0] = _region_edges(g, plan, parent, pos, sized)
    return box


def _region_edges(g, plan: ViewPlan, parent: int, pos, sized) -> list[str]:
    drawn = {(e.src, e.dst): e for e in plan.edges}
    out, seen = [], set()
    for a, b, src, dst in _item_edges(g, plan, parent):
        if (a, b) in seen:
            continue
        seen.add((a, b))
        (xa, ya), (xb, yb) = pos[a], pos[b]
        x1, y1 = xa + sized[a].width / 2, ya + sized[a].height
        x2, y2 = xb + sized[b].width / 2, yb
        e = drawn.get((src, dst))
        case = e.case if e is not None else -1
        cls = "terra-edge" + (f" terra-case terra-case-{case}" if case >= 0 else "")
        cls += " terra-variant" if e is not None and e.variant else ""
        label = "" if e is None else e.label or (f"case {case}" if case >= 0 else "")
        out.append(
            f'<g id="e_{src}_{dst}" class="edge {cls}"><path d="M{x1:.1f},{y1:.1f} '
            f'L{x2:.1f},{y2:.1f}" stroke="#868e96" fill="none" '
            'marker-end="url(#terra-arrow)"/>'
            + (f'<text x="{(x1 + x2) / 2 + 4:.1f}" y="{(y1 + y2) / 2:.1f}" '
               f'font-size="9" fill="#1c7ed6">{escape(label)}</text>' if label else "")
            + "</g>"
        )
    return out


def _item_box(g: TraceGraph, plan: ViewPlan, key: str, marks) -> _Box:
    if key.startswith("cluster_"):
        lid = int(key[8:])
        inner = _layout_region(g, plan, lid, marks)
        n = g.nodes[lid]
        label = loop_text(n)
        w = max(inner.width, len(label) * CHAR_W) + 2 * PAD
        h = inner.height + 2 * PAD + 16
        cls = " ".join(["cluster", "terra-loop", *marks.get(f"n{lid}", [])])
        parts = [
            f'<g id="{key}" class="{cls}"><rect width="{w:.1f}" height="{h:.1f}" rx="8" '
            f'fill="#f8f7ff" stroke="#7048e8"/><text x="{w / 2:.1f}" y="14" '
            f'text-anchor="middle" font-size="11">{escape(label)}</text></g>',
            f'<g transform="translate({(w - inner.width) / 2:.1f},{PAD + 16})">',
            *inner.parts,
            "</g>",
        ]
        return _Box(w, h, parts)
    return _leaf_box(g, plan, key, marks)


def _leaf_box(g: TraceGraph, plan: ViewPlan, key: str, marks) -> _Box:
    el = plan.elements[key]
    if el.kind == "case":
        site = plan.cases[key][0]
        cls = " ".join(["node", "terra-case-node", "terra-user-case", "terra-branch",
                        *marks.get(key, [])])
        return _text_box(key, cls, [site.text or "if", site.location], NODE_H,
                         ("#fff3bf", "#f08c00"))
    first = g.nodes[el.members[0]]
    if el.kind == "chain":
        lines = [f"{len(el.members)} ops: {first.op_type} … {g.nodes[el.members[-1]].op_type}"]
        cls = ["terra-chain", "terra-collapsed"]
    elif el.kind == "loop":
        lines = [loop_text(first)]
        cls = ["terra-loop"]
    elif el.kind == "region":
        return _region_box(g, plan, key, marks)
    else:
        lines = [first.op_type or first.kind] if first.kind == "op" else [first.kind[0].upper()]
        cls = [f"terra-{first.kind}"] + (["terra-feed"] if first.feeds else [])
        cls += ["terra-fetch"] if first.fetches else []
        cls += ["terra-branch"] if first.id in plan.hexagons else []
    if first.kind == "op" or el.kind != "node":
        lines.append(first.location)
    cls = " ".join(["node", *cls, *marks.get(key, [])])
    return _text_box(key, cls, lines, NODE_H, ("#f8f9fa", "#495057"))


def _text_box(key: str, cls: str, lines: list[str], h: float, colors: tuple[str, str]) -> _Box:
    """A rounded box with ``lines`` of centred text, as wide as the longest."""
    w = max(len(s) for s in lines) * CHAR_W + 16
    texts = "".join(
        f'<text x="{w / 2:.1f}" y="{14 + 12 * i}" text-anchor="middle" font-size="10">'
        f"{escape(s)}</text>"
        for i, s in enumerate(lines)
    )
    fill, stroke = colors
    return _Box(w, h, [
        f'<g id="{key}" class="{cls}"><rect width="{w:.1f}" height="{h}" rx="6" '
        f'fill="{fill}" stroke="{stroke}"/>{texts}</g>'
    ])


def _region_box(g: TraceGraph, plan: ViewPlan, key: str, marks) -> _Box:
    """A region call: its caption and location; open, its op types listed below them."""
    n = g.nodes[plan.elements[key].members[0]]
    call, opened = g.region_call(n), n.id in plan.open_regions
    lines = [region_title(call, n, opened, plan.labels.get(n.id)), n.location]
    if opened:
        lines += list(call.ops[:REGION_LINES])
        lines += [f"… {len(call.ops) - REGION_LINES} more"] if len(call.ops) > REGION_LINES else []
    cls = " ".join(["node", "terra-op", "terra-region", f"terra-region-{call.kind}",
                    *([] if opened else ["terra-collapsed"]), *marks.get(key, [])])
    return _text_box("cluster_" * opened + key, cls, lines, max(NODE_H, 10 + 12 * len(lines)),
                     COLORS.get(call.kind, COLORS["guard"]))
