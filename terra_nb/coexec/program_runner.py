"""Running the whole program: the PythonRunner's side of the channels.

``WholeProgram`` is the ``Executor`` (executor.py) of ``Terra(program="whole")``. Each
co-executed iteration is one run of the generated program (``program_plan.py``) on the
GraphRunner's thread (a ``ProgramRun``). For each op Python issues, ``issue`` follows the path
(``PathWalker``) and sends the decisions and the fed values the program reads at that op; a fetch
takes values from the fetch queues, in order. The program commits the iteration's variable writes
when ``end_iteration`` sends the last decision.

On a divergence (an op, a path or a read the program does not hold), ``abandon`` lets the earlier
iterations commit, closes this iteration's channels (nothing of it was committed) and replays the
ops Python issued eagerly, one by one, on the untouched variables, so that every placeholder
Python still holds gets its real value; the iteration then goes on in tracing. A run that fails
(an op raising) commits nothing either: ``_check`` replays that iteration's ops eagerly, which
raises eager's own error after eager's updates, and drops what Python issued after it.
"""

from __future__ import annotations

import weakref
from collections import deque
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import record
from tensorflow.python.framework import errors

from .. import capture
from ..capture.location import LocationTable
from ..capture.placeholder import Placeholder
from .control_flow import PathError, PathWalker
from .executor import FLUSH_AT, IssuedOp, KeptPlaceholders
from .graph_runner import GraphRunner, ProgramRun, ProgramRuns
from .lower import Wire, make_segment, real_argument, run_segment
from .program_constants import Constant, ConstantLearner
from .program_plan import Channels, Program
from .program_wiring import fed_index, give_values, index_of, unvalued, variable_key


class WholeProgram:
    """The PythonRunner's side of whole-program co-execution (see the module docstring).

    Small values Python feeds that stay the same (Keras's Python floats, as tensors) cost a
    queue round trip each; ``learner`` (program_constants.py) tells when the engine should
    regenerate the program holding them as constants.
    Decisions and feeds are held back and sent together (``flush``): when Python issued an op
    whose value it read in an earlier iteration (``read_nodes``), before it waits for a value, at
    the end of the iteration, and every ``FLUSH_AT`` of them (executor.py: one flush policy)."""


    claims_pure_calls = True  # a value carried from a traced iteration is the program's work

    def __init__(self, graph: GraphRunner, handles: dict[int, Any], read_nodes: set[int],
                 locations: LocationTable, kept: KeptPlaceholders) -> None:
        self.handles = handles  # variable handle id -> handle (for replay)
        self.read_nodes = read_nodes  # TraceGraph nodes whose values Python read
        self.locations = locations
        self.kept = kept
        self.graph = graph  # runs the program, an iteration a run
        self.runs = ProgramRuns()
        self.program: Program | None = None
        self.channels: Channels | None = None
        self.submitted = 0
        self._walker: PathWalker | None = None
        self._records: list[tuple] = []  # per issued op: (entry, wiring, output refs)
        self._made: dict[int, tuple] = {}  # id(placeholder) -> (position, node, output, trips)
        self._latest: dict[tuple[int, int], int] = {}  # (node, output) -> id of its newest value
        self._decisions: list[int] = []  # held back until a flush
        self._feeds: list[tuple[str, Any]] = []
        self._args: list = []  # the values fed to the iteration's ops, for the replay
        self._fetch_order: dict[str, deque] = {}  # dtype -> (iteration, placeholder ref)
        self._iteration = 0
        self._ticket = 0
        # Iterations sent to commit whose runs may not have finished: (ticket, iteration,
        # records, args), kept to replay the one whose run fails.
        self._unfinished: deque = deque()
        self.failed: BaseException | None = None  # a run failed: the error Python was given
        self.learner = ConstantLearner()  # fed values that stay the same

    # -- iterations -------------------------------------------------------------------------

    def begin(self, program: Program, iteration: int) -> WholeProgram:
        """Start a co-executed iteration: queue the program's run for it."""
        self.learner.count_run(program is not self.program)
        if program is not self.program or self.channels is None:
            self.settle()  # earlier runs use the old program and channels
            with capture.bypass():
                self.program, self.channels = program, program.channels()
            self._fetch_order = {d: deque() for d in program.fetch_dtypes}
        self._iteration = iteration
        self.failed = None
        self._drain(iteration - 2)  # bounded run-ahead: fetched values do not pile up
        while (self._unfinished and self._unfinished[0][0] <= self.runs.done
               and self.runs.error is None):  # a failed run's ops are replayed first
            self._unfinished.popleft()
        self._walker = PathWalker(program.plan, program.same)
        self._records, self._args, self._made = [], [], {}
        self._decisions, self._feeds = [], []
        self._latest = {}
        self.graph.run_program(ProgramRun(program, self.channels, iteration, self.runs))
        self.submitted += 1
        self._ticket = self.submitted
        return self

    def computes(self, entry) -> bool:
        return entry.node not in self.program.python_side

    def catch_up(self) -> None:
        raise PathError("an op Python must run for real: the program cannot hand over its "
                        "state mid-iteration")

    def escaping(self) -> list:
        """This iteration's placeholders Python still holds that the program does not fetch:
        with one of them alive past its end, the iteration cannot end in the program."""
        return [ph for _, _, refs in self._records for ref in refs
                if (ph := ref()) is not None and ph.value is None and not ph.queued]

    def end_iteration(self) -> None:
        """Finish the iteration: the program commits once it has run to the end. ``PathError``
        when a placeholder the program does not fetch outlives it."""
        escaping = self.escaping()
        if escaping:
            error = PathError(f"a value of node {escaping[0].node} outlives the iteration")
            error.escaping = escaping
            raise error
        self._decisions += self._walker.finish()
        self.flush()
        self._walker = None
        self._unfinished.append((self._ticket, self._iteration, self._records, self._args))

    # -- ops --------------------------------------------------------------------------------

    def issue(self, op: IssuedOp) -> int:
        """Send what the program reads at ``op``'s node; raise ``PathError`` if it cannot.
        Returns the number of inputs fed."""
        entry, flat, outs = op.entry, op.inputs, op.outputs
        prev = op.prev_loc  # where a new trip begins tells paths apart (``PathWalker.step``)
        boundary = None if prev is None else self.locations.boundary(prev, op.loc)
        matched, decisions = self._walker.step(entry.node, boundary,
                                               self.locations.locations[op.loc].loops)
        node = self.program.graph.nodes[matched]
        if len(flat) != len(node.sources) or entry.attrs != node.attrs:
            raise PathError(f"node {node.id} called with other attributes or input count")
        wiring, feeds = [], []
        inputs = self.program.options[node.id]
        for i, x in enumerate(flat):
            options = inputs[i]
            if type(x) is Placeholder and id(x) in self._made:  # the program has it too
                wiring.append(self._computed(node, x, options, decisions))
            elif not options:
                wiring.append(self._variable(node, x))
            else:
                wiring.append(self._fed(node, i, x, options, decisions, feeds))
        position = len(self._records)
        open_trips = self._walker.trips
        trips = tuple(map(tuple, open_trips)) if open_trips else ()
        for k, ph in enumerate(outs):
            self._made[id(ph)] = (position, node.id, k, trips)
            self._latest[(node.id, k)] = id(ph)
        for k in node.fetches:
            outs[k].expect_fetch()
            self._fetch_order[node.outputs[k].dtype].append((self._iteration, weakref.ref(outs[k])))
        self._records.append((entry, tuple(wiring), [weakref.ref(o) for o in outs]))
        self.kept.add(outs)  # any of them may outlive the loop
        self._decisions += decisions
        self._feeds += feeds
        if node.id in self.read_nodes or len(self._decisions) + len(self._feeds) >= FLUSH_AT:
            self.flush()  # a value Python reads: the program computes it while Python goes on
        return len(feeds)

    def _computed(self, node, x: Placeholder, options: tuple, decisions: list) -> tuple:
        """An input the program computed this iteration: which source, which loop trip."""
        pos, source, k, trips = self._made[id(x)]
        if len(options) > 1:
            decisions.append(index_of(options, source, k))
        else:
            index_of(options, source, k)  # the one source the program reads there
        trip = self._trip_of(source, k, trips)
        if trip is not None:
            decisions.append(trip)
        elif self._latest[(source, k)] != id(x):
            # inside a loop the program keeps the latest value of a node
            raise PathError(f"node {node.id} reads an earlier trip's value of node {source}")
        return Wire("op", pos, k)

    def _variable(self, node, x) -> tuple:
        """A variable input: it must be the variable the program captured there."""
        if type(x) is Placeholder or variable_key(node) != f"v{x._id}":
            raise PathError(f"node {node.id} reads another variable")
        if x._id not in self.handles:
            self.handles[x._id] = x
        return Wire("var", x._id)

    def _fed(self, node, i: int, x, options: tuple, decisions: list, feeds: list) -> tuple:
        """An input Python supplies: checked against a constant the program holds, or fed."""
        choice = fed_index(options)
        if choice is None:
            raise PathError(f"node {node.id} input {i} is fed where the program computes")
        value = x.value if type(x) is Placeholder else x
        if value is None:  # a placeholder of an earlier iteration not fetched yet
            value = self.materialise(x)
            if value is None:
                raise PathError("the program's run failed ahead of Python's checks")
        held = options[choice]
        if type(held) is Constant:
            if not held.holds(value):
                self.learner.varying.add((node.id, i))
                raise PathError(f"input {i} of node {node.id} changed from the value the "
                                f"program holds")
        else:
            feeds.append((node.input_specs[i].dtype, value))
            self.learner.learn((node.id, i), value)
        if len(options) > 1:
            decisions.append(choice)
        self._args.append(value)
        return Wire("arg", len(self._args) - 1)

    def flush(self) -> None:
        """Send the decisions and feeds held back (one enqueue for all decisions)."""
        decisions, feeds = self._decisions, self._feeds
        self._decisions, self._feeds = [], []
        try:
            self._send(decisions, feeds)
        except (errors.OutOfRangeError, errors.CancelledError):  # the run failed, closing them
            if self._check():  # not eager's failure: the run went ahead of Python's checks
                raise PathError("the program's run failed ahead of Python's checks") from None
            raise

    def _send(self, decisions: list[int], feeds: list) -> None:
        with capture.bypass():
            if decisions:
                self.channels.path.enqueue_many([np.asarray(decisions, np.int32)])
            for dtype, value in feeds:  # one by one: enqueue_many on a queue of unknown
                # shapes crashes TensorFlow 2.21
                self.channels.feeds[dtype].enqueue([tf.convert_to_tensor(value, dtype)])

    def _trip_of(self, node: int, output: int, trips: tuple) -> int | None:
        """The trip of its loop a value was made in, when the program reads it after that loop
        (where it keeps every trip's value); else None."""
        loop = self.program.per_trip.get((node, output))
        if loop is None or any(open_loop == loop for open_loop, _ in self._walker.trips):
            return None
        return dict(trips)[loop]

    def materialise(self, ph: Placeholder):
        """The value of a fetch point's placeholder, from the fetch queue (waiting if needed);
        None if the program does not fetch it."""
        if ph.value is not None:
            return ph.value
        if ph.failed is not None:
            raise ph.failed  # made by an iteration whose run failed
        if not ph.queued:
            return None
        if self.channels is not None:
            self.flush()  # the program may need what is held back to get there
        order = self._fetch_order[ph.dtype.name]
        while ph.value is None:
            if not self._take(order, ph.dtype.name):
                return None  # the run failed ahead of Python, which must leave the program
        return ph.value

    def _take(self, order: deque, dtype: str) -> bool:
        """Move the next fetched value into its placeholder; False if the run had failed ahead
        of Python's checks (``_check`` replayed the iteration: its values are eager's)."""
        iteration, ref = order.popleft()
        try:
            with capture.bypass():
                value = self.channels.fetches[dtype].dequeue()
        except (errors.OutOfRangeError, errors.CancelledError):
            if self._check():
                return False
            raise
        target = ref()
        if target is not None:
            target.resolve(value)
        return True

    def _drain(self, upto: int) -> None:
        """Take the fetched values of iterations up to ``upto`` (they are all sent by now)."""
        for dtype, order in self._fetch_order.items():
            while order and order[0][0] <= upto:
                self._take(order, dtype)

    def _check(self) -> bool:
        """If a run failed: drop every run not committed, replay the failed iteration's ops
        eagerly (which raises eager's own error, with eager's updates up to the failing op),
        and raise that error; what Python issued after it never runs, and reading it raises.

        The current iteration's run may fail on a value Python has not checked yet (a held
        constant that changed: the program ran ahead with the old one). If its replay raises
        nothing, the error was not eager's: its placeholders get the replayed values and this
        returns True (Python leaves the program); False if no run failed."""
        with self.runs.cond:
            error, failed_iteration = self.runs.error, self.runs.error_iteration
            self.runs.error = None
        if error is None:
            return False
        confirmed = [(r, a) for _, i, r, a in self._unfinished if i == failed_iteration]
        failed = confirmed[0] if confirmed else (self._records, self._args)
        targets = unvalued(failed[0])
        try:  # the iterations before it committed: their fetched values are in the queues
            self._drain(failed_iteration - 1)
        except (errors.OutOfRangeError, errors.CancelledError):
            pass
        dropped = [ref for order in self._fetch_order.values() for _, ref in order]
        dropped += [ref for _, _, refs in self._records for ref in refs]
        self._unfinished.clear()
        for order in self._fetch_order.values():
            order.clear()
        self.channels, self._walker = None, None
        self._records, self._args, self._decisions, self._feeds = [], [], [], []
        ran: list[list] = []  # the replayed ops' outputs, up to a failing one
        try:
            values = self._run(*failed, [(p, k) for p, k, _ in targets], ran)
        except Exception as eager_error:  # the same failure, raised where eager raises it
            error = eager_error
            made = [t for t in targets if t[0] < len(ran)]  # eager has what ran before it
            give_values(made, [ran[p][k] for p, k, _ in made])
            error._terra_iteration = failed_iteration
            records = failed[0]
            self.graph.failures.note(error, records[len(ran)][0].node
                                     if len(ran) < len(records) else None)
        else:
            if not confirmed:  # eager did not fail: the run had gone ahead of a check
                give_values(targets, values)
                return True
        for ref in dropped:
            ph = ref()
            if ph is not None and ph.value is None:
                ph.fail(error)
        self.failed = error
        raise error

    # -- divergence -------------------------------------------------------------------------

    def abandon(self) -> None:
        """Drop this iteration's run (earlier ones commit first) and give every placeholder of
        the iteration its real value by replaying its ops eagerly."""
        self.runs.wait(self._ticket - 1)
        if self.channels is not None:
            self._drain(self._iteration - 1)
            with capture.bypass():
                self.channels.close()
        self.runs.wait(self._ticket)
        self.channels = None
        self._walker = None
        self._decisions, self._feeds = [], []
        self._check()
        for order in self._fetch_order.values():
            while order and order[-1][0] == self._iteration:
                order.pop()
        records, self._records = self._records, []
        targets = unvalued(records)
        give_values(targets, self._run(records, self._args, [(p, k) for p, k, _ in targets]))

    def _run(self, records: list, args: list, returns: list, ran: list | None = None) -> list:
        """Run issued ops eagerly, one by one; the values of outputs ``returns`` (``ran``: each
        op's outputs as it runs, see ``run_segment``)."""
        if not records:
            return []
        ops_key = tuple((entry.uid, wiring, "") for entry, wiring, _ in records)
        segment = make_segment((ops_key, tuple(returns)), [r[0] for r in records])
        args = [real_argument(a, dtype) for a, (dtype, _) in zip(args, segment.args)]
        with capture.bypass(), record.stop_recording():
            return run_segment(segment, args, self.handles, env=ran)

    # -- between iterations -----------------------------------------------------------------

    def sync(self, deliver: bool = True) -> None:
        """See ``settle``."""
        self.settle(deliver)

    def settle(self, deliver: bool = True) -> None:
        """Wait until every submitted run has finished (committed) and take its fetches; raise a
        failure (unless not ``deliver``: then it waits for the next settle)."""
        self.runs.wait(self.submitted)
        if not deliver:
            return
        self._check()
        if self.channels is not None:
            self._drain(self._iteration)

    def close(self) -> None:
        """Let every run finish (an iteration left unfinished is dropped); the GraphRunner's
        thread is stopped by its owner."""
        try:
            if self._walker is not None:  # its run would wait for Python forever
                self.abandon()  # and its ops run eagerly, as eager ran them
            self.settle()
        finally:
            if self.channels is not None:  # a run still waiting for Python would hang the thread
                with capture.bypass():
                    self.channels.close()
