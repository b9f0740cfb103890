"""The TraceGraph as ``Terra.graph`` hands it out: the merged graph with what only the running
program knows written into it as plain data, so an exported graph (and every view of it) shows
the user's program: the region calls among its nodes, each branch point's user statement
(``trace/branches.py``, from the ops' user frames and the source of their files) and the
names of the variables it reads.
"""

from __future__ import annotations

import linecache
import os
from dataclasses import replace
from typing import Any

from .capture.location import LocationTable
from .trace.branches import Stack, branch_sites
from .trace.tracegraph import RegionCall, TraceGraph


def user_graph(g: TraceGraph, learned: Any, calls: dict[str, RegionCall]) -> TraceGraph:
    """``g`` with its region calls (of ``calls``), branch sites and variable names."""
    present = {n.op_type for n in g.nodes}
    g = replace(g, region_calls=tuple(c for op, c in sorted(calls.items()) if op in present))
    stacks = user_stacks(g, learned.locations)
    files = {file for stack in stacks.values() for file, _ in stack}
    keys = {s.detail for n in g.nodes for seen in n.sources for s in seen if s.kind == "var"}
    names = tuple(sorted((k, v) for k, v in learned.variable_names.items() if v and k in keys))
    return replace(g, branches=branch_sites(g, source_texts(files), stacks), variables=names)


def user_stacks(g: TraceGraph, locations: LocationTable) -> dict[int, Stack]:
    """Op node id -> its user frames ``(file, line)``, the loop's frame first."""
    table = locations.locations
    return {n.id: tuple((file, line) for file, line, _ in table[n.loc].user_frames)
            for n in g.nodes if n.kind == "op" and 0 <= n.loc < len(table)
            and table[n.loc].user_frames}


def source_texts(files: set[str]) -> dict[str, str]:
    """File -> its source, from ``linecache`` (which holds notebook cells), under its path and
    its base name (a loop node knows its file by base name)."""
    out: dict[str, str] = {}
    for file in files:
        text = "".join(linecache.getlines(file))
        if text:
            out[file] = out.setdefault(os.path.basename(file), text)
    return out
