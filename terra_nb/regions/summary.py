"""What the regions of a loop did, as plain printable data (``terra.regions``, ``explain()``).

One row per guarded call (an object's method with one set of argument specs): how many ops its
region runs, hits, guard misses, and its state: ``formed``, ``refused`` (with the reason) or
``tracing`` (not formed yet), with the user source line of the call. Hits are this run's (a
re-run cell carries its regions over: the hits before are ``earlier``).

What a person reads (``str()``, ``line()``) is one line per call site (``sites``): the rows of
one call at one source line (another object after a re-run, other argument specs, collected
objects) are one site, which says how many versions it has.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class RegionRow:
    """The builder of one row (only ``Regions`` mutates it)."""

    name: str  # e.g. Sequential.__call__
    source: str  # file:line  source text
    call: str = ""  # the call expression on that line (model(x)), or ""
    state: str = "tracing"
    reason: str = ""
    ops: int = 0
    hits: int = 0
    misses: int = 0
    refusals: int = 0  # traced calls in a row that showed an effect
    unlike: int = 0  # traced runs since the last formation that matched no earlier run
    any_shape: bool = False  # answered by its shape family's function for any shape
    last_miss: str = ""  # why the last guard miss happened (kept once formed again)
    objects: int = 0  # a folded row: the collected objects whose rows it holds
    earlier: int = 0  # hits in earlier runs (a re-run cell that carried the regions over)

    def new_run(self) -> None:
        """A re-run cell's loop starts: hits count afresh."""
        self.earlier += self.hits
        self.hits = 0

    def refuse(self, reason: str) -> None:
        self.state, self.reason = "refused", reason
        self.refusals += 1

    def note(self, reason: str) -> None:
        if self.state != "formed":
            self.state, self.reason, self.refusals = "tracing", reason, 0

    def form(self, ops: int) -> None:
        self.state, self.reason, self.ops, self.refusals, self.unlike = "formed", "", ops, 0, 0

    def collected(self) -> None:
        """Its object was collected: listed still, no longer formed."""
        self.state, self.reason = "tracing", COLLECTED

    def miss(self, reason: str) -> None:
        self.misses += 1
        self.state, self.reason, self.last_miss = "tracing", reason, reason

    def frozen(self) -> RegionInfo:
        return RegionInfo(self.name, self.source, self.state, self.reason, self.ops, self.hits,
                          self.misses, self.any_shape, self.last_miss, self.earlier,
                          max(self.objects, self.reason == COLLECTED))


COLLECTED = "its object was collected"


@dataclass(frozen=True, slots=True)
class RegionInfo:
    name: str
    source: str
    state: str
    reason: str
    ops: int
    hits: int
    misses: int
    any_shape: bool = False  # its compiled function serves every shape of its arguments
    last_miss: str = ""  # why its last guard miss happened
    earlier: int = 0  # hits in earlier runs of a re-run cell
    collected: int = 0  # objects of this row that were collected

    def __str__(self) -> str:
        why = f" ({self.reason})" if self.reason and self.state != "formed" else ""
        if self.state == "formed":
            notes = ["any shape"] * self.any_shape + [f"last miss: {self.last_miss}"] * bool(
                self.last_miss)
            why = f" ({'; '.join(notes)})" if notes else ""
        return (f"{self.name:<34} {self.ops:>5} {self.hits:>6} {self.misses:>6}  "
                f"{self.state}{why}  at {self.source}")


@dataclass(frozen=True, slots=True)
class RegionSummary:
    """``terra.regions``: one row per guarded call; ``enabled`` False: regions were off."""

    rows: tuple[RegionInfo, ...] = ()
    enabled: bool = True

    @property
    def listed(self) -> bool:
        """Whether explanations list the regions: they were on and the loop made a framework
        call (a loop without Keras calls has nothing to say)."""
        return self.enabled and bool(self.rows)

    @property
    def formed(self) -> int:
        return sum(r.state == "formed" for r in self.rows)

    @property
    def refused(self) -> int:
        return sum(r.state == "refused" for r in self.rows)

    @property
    def hits(self) -> int:
        return sum(r.hits for r in self.rows)

    @property
    def misses(self) -> int:
        return sum(r.misses for r in self.rows)

    @property
    def sites(self) -> tuple[CallSite, ...]:
        """One per call site (call and source line), in the order first seen."""
        groups: dict[tuple[str, str], list[RegionInfo]] = {}
        for r in self.rows:
            groups.setdefault((r.name, r.source), []).append(r)
        return tuple(CallSite.of(rows) for rows in groups.values())

    def line(self) -> str:
        """One line: the totals, by call site."""
        if not self.enabled:
            return "off (Terra(regions=True) or %%terra --regions turns them on)"
        sites = self.sites
        formed = sum(s.state == "formed" for s in sites)
        versions = f" ({self.formed} regions)" if self.formed != formed else ""
        earlier = sum(r.earlier for r in self.rows)
        before = f" (and {earlier} in earlier runs)" if earlier else ""
        return (f"{formed} of {len(sites)} call sites formed{versions}, {self.hits} hits"
                f"{before}, {self.misses} guard misses, "
                f"{sum(s.state == 'refused' for s in sites)} refused")

    def __str__(self) -> str:
        if not self.enabled or not self.rows:
            return f"regions: {self.line() if not self.enabled else 'none (no framework call)'}"
        head = f"{'region':<34} {'ops':>5} {'hits':>6} {'misses':>6}  state"
        return "\n".join([f"regions: {self.line()}", head, *map(str, self.sites)])

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(str(self))


@dataclass(frozen=True, slots=True)
class CallSite:
    """The rows of one call at one source line: its versions (another object after a re-run,
    other argument specs: each a region of its own) and its collected objects, as one line."""

    name: str
    source: str
    state: str
    reason: str
    ops: tuple[int, ...]
    hits: int
    misses: int
    versions: int  # rows formed for it (of its live objects and argument specs)
    collected: int
    earlier: int
    notes: str

    @classmethod
    def of(cls, rows: list[RegionInfo]) -> CallSite:
        live = [r for r in rows if not r.collected]
        formed = [r for r in live if r.state == "formed"]
        shown = formed or [r for r in live if r.state == "refused"] or live or rows
        state = "formed" if formed else shown[0].state
        ops = tuple(sorted({r.ops for r in (formed or rows) if r.ops}))
        notes = []
        shared = any(r.any_shape for r in formed)  # one function for every shape of them
        functions = shared + sum(not r.any_shape for r in formed)
        if shared:
            notes.append("any shape")
        if functions > 1:
            notes.append(f"{functions} versions: one per object and argument specs")
        misses = [r.last_miss for r in formed if r.last_miss]
        if misses:
            notes.append(f"last miss: {misses[-1]}")
        collected = sum(r.collected for r in rows)
        if collected:
            notes.append(f"{collected} collected object{'s' * (collected != 1)} folded in")
        return cls(rows[0].name, rows[0].source, state, "" if formed else shown[0].reason, ops,
                   sum(r.hits for r in rows), sum(r.misses for r in rows), len(formed),
                   collected, sum(r.earlier for r in rows), "; ".join(notes))

    def __str__(self) -> str:
        ops = "/".join(map(str, self.ops)) or "0"
        why = f" ({self.reason})" if self.reason and self.state != "formed" else ""
        notes = f" ({self.notes})" if self.notes else ""
        return (f"{self.name:<34} {ops:>5} {self.hits:>6} {self.misses:>6}  "
                f"{self.state}{why}{notes}  at {self.source}")


class Explained(tuple):
    """``terra.explain()``: the fallbacks (a tuple, as always), ``traced`` (every other
    iteration that did not co-execute, in runs of one reason: ``iterations.TracedRun``) and
    ``regions`` (the regions' summary: formed, hits, misses, refusals); ``str()`` prints all.
    "no fallbacks" is said alone only when every iteration co-executed."""

    regions: RegionSummary
    traced: tuple

    def __new__(cls, fallbacks, regions: RegionSummary, traced: tuple = ()):
        self = super().__new__(cls, fallbacks)
        self.regions, self.traced = regions, tuple(traced)
        return self

    def lines(self) -> list[str]:
        """The fallbacks, then the other iterations that did not co-execute."""
        head = [str(f) for f in self]
        if self.traced:
            head.append("did not co-execute:" if head else "no fallbacks; did not co-execute:")
            head += [f"  {run}" for run in self.traced]
        return head

    def __str__(self) -> str:
        lines = self.lines() or ["no fallbacks"]
        if self.regions.listed:
            lines.append(str(self.regions))
        return "\n".join(lines)
