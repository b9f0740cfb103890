"""What the regions of a loop did, as plain printable data (``terra.regions``, ``explain()``).

One row per guarded call (an object's method with one set of argument specs): how many ops its
region runs, hits, guard misses, and its state: ``formed``, ``refused`` (with the reason) or
``tracing`` (not formed yet), with the user source line of the call.
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
    any_shape: bool = False  # answered by its shape family's function for any shape
    last_miss: str = ""  # why the last guard miss happened (kept once formed again)
    objects: int = 0  # a folded row: the collected objects whose rows it holds

    def refuse(self, reason: str) -> None:
        self.state, self.reason = "refused", reason
        self.refusals += 1

    def note(self, reason: str) -> None:
        if self.state != "formed":
            self.state, self.reason, self.refusals = "tracing", reason, 0

    def form(self, ops: int) -> None:
        self.state, self.reason, self.ops, self.refusals = "formed", "", ops, 0

    def collected(self) -> None:
        """Its object was collected: listed still, no longer formed."""
        self.state, self.reason = "tracing", "its object was collected"

    def miss(self, reason: str) -> None:
        self.misses += 1
        self.state, self.reason, self.last_miss = "tracing", reason, reason

    def frozen(self) -> RegionInfo:
        return RegionInfo(self.name, self.source, self.state, self.reason, self.ops, self.hits,
                          self.misses, self.any_shape, self.last_miss)


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

    def line(self) -> str:
        """One line: the totals."""
        if not self.enabled:
            return "off (Terra(regions=True) or %%terra --regions turns them on)"
        return (f"{self.formed} formed, {self.hits} hits, {self.misses} guard misses, "
                f"{self.refused} refused")

    def __str__(self) -> str:
        if not self.enabled or not self.rows:
            return f"regions: {self.line() if not self.enabled else 'none (no framework call)'}"
        head = f"{'region':<34} {'ops':>5} {'hits':>6} {'misses':>6}  state"
        return "\n".join([f"regions: {self.line()}", head, *map(str, self.rows)])

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(str(self))


class Explained(tuple):
    """``terra.explain()``: the fallbacks (a tuple, as always), and ``regions`` (the regions'
    summary: formed, hits, misses, refusals); ``str()`` prints both."""

    regions: RegionSummary

    def __new__(cls, fallbacks, regions: RegionSummary):
        self = super().__new__(cls, fallbacks)
        self.regions = regions
        return self

    def __str__(self) -> str:
        lines = [str(f) for f in self] or ["no fallbacks"]
        if self.regions.listed:
            lines.append(str(self.regions))
        return "\n".join(lines)
