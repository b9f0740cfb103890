"""The differential check every matrix case makes, and how cases become pytest parameters.

``check(key, case, setting)`` runs the case's loop eagerly (no Terra; once per ``key``, kept
for the other settings) and under Terra in ``setting``:

- ``coexec``: ``Terra()``, regions on (the default). The suite's root conftest makes a tape's
  gradient function G never due (its formation is timed on the machine), so here the tapes run
  TensorFlow's gradient and their call site is declined;
- ``tapes``: ``Terra()`` with G's formation free, so G forms as soon as a call has paid (the
  default's behaviour on a long loop, made independent of the machine's speed);
- ``no-regions``: ``Terra(regions=False)``, op by op;
- ``lazy``: ``Terra(mode="lazy")``, regions on;

and asserts:

- equal to eager: every per-step loss, every metric result read and every final variable (the
  model's, the optimizer's, the metric's) bit for bit (``np.array_equal``). No case has a
  tolerance: eager itself is deterministic on every program of the matrix (each run twice in
  one process gave the same bits: CPU kernels, seeded Keras random layers), so any difference,
  even one ulp, is Terra's;
- what ran: at least ``AT_LEAST`` of the iterations co-executed (iterations traced while regions
  formed not counted), in the plan the Terra was made with, so that a silent fallback to
  eager-like tracing cannot pass on eager's own numbers;
- with regions on, every row of ``terra.regions`` is accounted for: formed and hit, refused with
  a reason, or (a tape's call site) declined with a reason. A row left forming or unhit fails.

The record of what ran (phases, every region row) is printed, attached to the test report
(``record_property``) and listed at the end of the session by ``conftest.py``.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest
from region_programs import run
from what_ran import assert_coexecuted, phases

FULL = os.environ.get("TERRA_MATRIX", "").lower() == "full"
SETTINGS = {"coexec": {}, "tapes": {}, "no-regions": {"regions": False},
            "lazy": {"mode": "lazy"}}
AT_LEAST = 0.3
RECORDS: list[tuple[str, str]] = []  # (test id, what ran): the session summary's lines
_EAGER: dict[str, tuple] = {}


def params(cases) -> list:
    """pytest parameters from (id, args, fast) triples: the fast ones (marked ``fast``) by
    default, all of them with ``TERRA_MATRIX=full``."""
    return [pytest.param(*args, id=case_id, marks=[pytest.mark.fast] if fast else [])
            for case_id, args, fast in cases if FULL or fast]


def eager(key: str, program) -> tuple:
    """The eager run of ``program`` (values, variables), once per ``key``."""
    if key not in _EAGER:
        values, variables, _, _, _ = run(program, None)
        _EAGER[key] = (values, variables)
    return _EAGER[key]


@contextlib.contextmanager
def tape_formation(setting: str):
    """Under ``tapes``, a tape's G costs nothing to form (as ``tests/tf/test_tape_regions``)."""
    from terra_nb.regions import tapes

    saved = tapes.FORM_BASE_S, tapes.FORM_PER_OP_S
    if setting == "tapes":
        tapes.FORM_BASE_S = tapes.FORM_PER_OP_S = 0.0
    try:
        yield
    finally:
        tapes.FORM_BASE_S, tapes.FORM_PER_OP_S = saved


def row_text(row) -> str:
    why = f" ({row.reason})" if row.reason else ""
    return f"{row.name}={row.state}/{row.hits} hits/{row.misses} misses{why}"


def what_ran(terra, setting: str) -> str:
    """One line: the setting, the iterations' phases, every region row."""
    counts = {p: phases(terra).count(p) for p in ("tracing", "coexec", "fallback", "eager")}
    forming = sum(s.regions_forming for s in terra.stats)
    ran = " ".join(f"{p}={n}" for p, n in counts.items() if n)
    rows = "; ".join(map(row_text, terra.regions.rows)) if terra.regions.enabled else "off"
    return f"{setting}: {ran} (forming {forming}) | regions: {rows}"


def row_accounted(row) -> bool:
    """Formed and hit, refused with a reason, or a tape call site declined or still renting
    (the README's tape regions: a ``GradientTape.gradient`` row whose G would not repay is
    ``tracing (declined: ...)``; one whose G has not come due by the loop's end, ``tracing
    (traced)``: its tapes are answered by TensorFlow's gradient, and G forms only once equal
    to it bit for bit)."""
    if row.state == "formed":
        return row.hits > 0
    if row.state == "refused":
        return bool(row.reason.strip())
    return row.name == "GradientTape.gradient" and row.reason.startswith(("declined", "traced"))


def differences(want: tuple, got: tuple) -> list[str]:
    """What differs between eager's (values, variables) and Terra's, worst first per kind."""
    (want_values, want_vars), (got_values, got_vars) = want, got
    out = []
    for name in want_values:
        a, b = np.asarray(want_values[name]), np.asarray(got_values[name])
        if a.shape != b.shape:
            out.append(f"{name}: {b.shape[0]} values, eager {a.shape[0]}")
        elif not np.array_equal(a, b, equal_nan=True):
            at = int(np.argmax(a != b))
            out.append(f"{name}[{at}] differs first, by {abs(a[at] - b[at]):.3g} "
                       f"(max {np.nanmax(np.abs(a - b)):.3g}; eager {a[at]!r}, got {b[at]!r})")
    if len(want_vars) != len(got_vars):
        return [*out, f"{len(got_vars)} variables, eager {len(want_vars)}"]
    diff = [(np.nanmax(np.abs(np.asarray(a, float) - np.asarray(b, float))), path)
            for (path, a), (_, b) in zip(want_vars, got_vars)
            if not np.array_equal(a, b, equal_nan=True)]
    if diff:
        worst, path = max(diff)
        out.append(f"{len(diff)}/{len(want_vars)} variables differ, most {path} by {worst:.3g}")
    return out


def check(key: str, program, setting: str, record_property) -> str:
    """The differential check (module docstring); returns the record of what ran."""
    want = eager(key, program)
    with tape_formation(setting):
        values, variables, _, terra, _ = run(program, SETTINGS[setting])
    record = what_ran(terra, setting)
    print(record)
    record_property("what_ran", record)
    RECORDS.append((key + "-" + setting, record))
    diff = differences(want, (values, variables))
    assert not diff, f"not eager's: {'; '.join(diff)} || {record}"
    try:
        assert_coexecuted(terra, at_least=AT_LEAST)
    except AssertionError as error:
        raise AssertionError(f"{error} || {record}") from None
    if terra.regions.enabled:
        loose = [row_text(r) for r in terra.regions.rows if not row_accounted(r)]
        assert not loose, f"region rows neither formed and hit nor refused: {loose} || {record}"
    return record
