"""Ski rental: when something run the slow way (rent per run) is worth a one-off cost (buying:
a compile) that makes its later runs cheap.

One rule serves every purchase terra-nb makes mid-loop: a graph segment's compile
(``compile_policy.py``) and a gradient tape's compiled gradient G (``regions/tapes.py``). What is
bought pays off once the rent paid so far, plus the rent its runs would pay in what is left of
the loop, reaches the cost.

- With the loop's length known (``horizon``, the iteration it ends before), the rent ahead is its
  submissions per iteration since its first × the iterations left × per run the lesser of its
  mean rent and its last run's (a first run instantiates functions: it counts once a second one
  came). Worth it, it is bought early in the loop; one the rest of the loop would not repay, never.
- Without a length, something on the loop's steady path (submitted in nearly every iteration
  since its first, three at least) will recur: it rents ``LOOKAHEAD`` iterations ahead at its
  mean rent. Steadiness is a share, not a run: a loop drawing one of a few lengths at random meets
  each length twice in a row now and then.

A ``cautious`` rental values every run, paid or ahead, at its least run's rent, its first
``WARM_RUNS`` left out and ``LEAST_OF`` runs at least after them: for rent that varies with what
else runs (a tape's gradient costs 5-10x as much in a traced iteration, and 3-5x in the first
co-executed ones, while young segments run op by op beside it, as later), and for a purchase that
costs a fallback as well. One run is no least: rnn-varlen's length-8 G formed mid-window on the
one run its rent had, 3.8 ms beside a segment's compile, against ~0.6 ms later (its window 290 ->
140-190 it/s: the G's formation, the segments it changed recompiled, and the other lengths'
tapes still copied).
"""

from __future__ import annotations

from dataclasses import dataclass

STEADY_SHARE = 0.9  # submitted in this share of the iterations since its first ...
STEADY_AFTER = 3  # ... and in this many: the steady path
LOOKAHEAD = 20  # iterations of rent a steady one pays ahead
WARM_RUNS = 2  # a cautious rental's first runs set no rent (a traced one, a first co-executed one)
LEAST_OF = 2  # ... and its least rent is of this many runs after them


@dataclass
class Rental:
    """The rent account of one thing run the slow way until bought for ``estimate`` seconds
    (before the buyer's learned scale)."""

    estimate: float
    spent: float = 0.0  # rent paid so far
    rent: float = 0.0  # what its next slow run will lose against a bought one: the mean ...
    runs: int = 0  # ... over its runs so far: one slow run, 20 times, would buy it
    last_rent: float = 0.0  # the last run's
    submitted: int = 0  # how many times it was submitted
    first: int = -1  # the iteration it was first submitted in
    last: int = -1  # ... and last
    iterations: int = 0  # how many iterations submitted it
    steady: bool = False  # submitted in nearly every iteration since its first: see above
    least: float = float("inf")  # the least rent of a run
    cautious: bool = False  # every run, paid or ahead, at its least run's rent
    _least_before: float | None = None  # the least before the last run, if that one counted

    def sighted(self, iteration: int) -> None:
        """Submitted (again) in ``iteration``."""
        self.submitted += 1
        if self.iterations == 0:
            self.first = iteration
        if self.iterations == 0 or iteration != self.last:
            self.iterations += 1
        self.last = iteration
        span = iteration - self.first + 1
        self.steady = self.iterations >= max(STEADY_AFTER, STEADY_SHARE * span)

    def paid(self, lost: float, rent: float | None = None) -> None:
        """One more slow run, which lost ``lost`` seconds against a bought one; ``rent``: what
        such runs will lose from now on, if not the same."""
        self.spent += lost
        self.runs += 1
        self.last_rent = lost if rent is None else rent
        self.rent += (self.last_rent - self.rent) / self.runs
        self._least_before = None
        if not self.cautious or self.runs > WARM_RUNS:
            self._least_before = self.least
            self.least = min(self.least, self.last_rent)

    def more(self, lost: float) -> None:
        """The last run lost ``lost`` seconds more than it paid (known only later)."""
        self.spent += lost
        self.last_rent += lost
        self.rent += lost / self.runs  # the mean of its runs' rent, the last one's included
        if self._least_before is not None:
            self.least = min(self._least_before, self.last_rent)

    def ahead(self, horizon: int | None) -> float:
        """The rent its coming slow runs would pay (see the module docstring)."""
        least = self.least if self.least < float("inf") else 0.0  # (warming up: none yet)
        if horizon is None:
            return LOOKAHEAD * (least if self.cautious else self.rent) if self.steady else 0.0
        if self.runs < 2:  # one run: its rent may be mostly functions instantiated
            return 0.0
        rate = self.submitted / (self.last - self.first + 1)
        left = max(0, horizon - 1 - self.last)
        return rate * left * (least if self.cautious else min(self.rent, self.last_rent))

    @property
    def rent_known(self) -> bool:
        """Whether its runs have set its rent: a cautious one's least needs ``WARM_RUNS +
        LEAST_OF`` runs; a plain one counts each run as it comes."""
        return not self.cautious or self.runs >= WARM_RUNS + LEAST_OF

    def due(self, horizon: int | None, scale: float = 1.0) -> bool:
        """Whether buying it now pays: the rent paid and ahead reach its scaled estimate."""
        if not self.rent_known:
            return False  # warming up
        spent = self.runs * self.least if self.cautious else self.spent
        return spent + self.ahead(horizon) >= self.estimate * scale
