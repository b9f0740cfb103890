"""When a tape region's G forms (``regions/tapes.py``): once the Python its gradients cost pays for
G's formation, by the compile policy's rule (``coexec/rental.py``). A loop too short to repay it
declines the call site and stops copying tapes (unless regions take hits on them); a recording
made while a region formed forms nothing. Every loop is compared with eager (values and variables
bit-identical) and asserts what ran: rows, Gs formed, tapes copied, co-executed share."""

import pytest
import tensorflow as tf
from region_programs import MODELS, OPTIMIZERS, compare, data, state_of, training

from terra_nb.coexec.rental import LEAST_OF, LOOKAHEAD, WARM_RUNS, Rental
from terra_nb.regions import tapes

TAPE = "GradientTape.gradient"


def tape_row(terra):
    (row,) = [r for r in terra.regions.rows if r.name == TAPE]
    return row


@pytest.fixture
def copies(monkeypatch):
    """The iterations in which a tape was copied (a TapeTee made at its push)."""
    made: list[int] = []
    original = tapes.Tapes.push

    def counting(self, tape, push):
        before = tape.__dict__.get(tapes._TEE)
        original(self, tape, push)
        if tape.__dict__.get(tapes._TEE) not in (None, before):
            made.append(self.iteration)

    monkeypatch.setattr(tapes.Tapes, "push", counting)
    return made


@pytest.fixture
def formed_in(monkeypatch):
    """The iterations in which a G was checked against the tape's gradients (formed or refused)."""
    checked: list[int] = []
    original = tapes.Tapes._check

    def check(self, *args):
        checked.append(self.iteration)
        return original(self, *args)

    monkeypatch.setattr(tapes.Tapes, "_check", check)
    return checked


def cost(monkeypatch, seconds: float) -> None:
    """Every G's formation is estimated at ``seconds`` (its fallback included)."""
    monkeypatch.setattr(tapes, "FORM_BASE_S", seconds / tapes.FALLBACK_FACTOR)
    monkeypatch.setattr(tapes, "FORM_PER_OP_S", 0.0)


def test_cautious_rent_is_the_least_run_after_the_warm_ones():
    careful, plain = Rental(estimate=1e-9, cautious=True), Rental(estimate=1e-9)
    for rental in (careful, plain):
        for iteration, lost in enumerate([0.5, 0.4]):
            rental.sighted(iteration)
            rental.paid(lost)
    assert plain.due(100) and not careful.due(100)  # its first two runs set no rent
    for rental in (careful, plain):
        for iteration, lost in enumerate([0.1, 0.3], start=2):
            rental.sighted(iteration)
            rental.paid(lost)
    # 10 iterations left (horizon 14, last 3), one call an iteration
    assert careful.ahead(14) == pytest.approx(10 * 0.1)
    assert plain.ahead(14) == pytest.approx(10 * 0.3)  # min(mean 0.325, last 0.3)
    assert plain.spent == careful.spent == pytest.approx(1.3)
    # cautious, the runs paid count at the least rent too: 4 * 0.1 + 1.0 against 1.3 + 3.0
    careful.estimate = plain.estimate = 2.0
    assert plain.due(14) and not careful.due(14)
    # no length: the steady path, ahead by LOOKAHEAD iterations
    assert careful.steady and careful.ahead(None) == pytest.approx(LOOKAHEAD * 0.1)
    assert plain.ahead(None) == pytest.approx(LOOKAHEAD * 0.325)  # the mean


def test_one_run_after_the_warm_ones_is_no_least():
    """rnn-varlen's length-8 G formed on the one run its rent had, 3.8 ms beside a compile
    (later runs ~0.6 ms): a cautious rental is due only once ``LEAST_OF`` runs set its least."""
    rental = Rental(estimate=1.0, cautious=True)
    runs = [0.5, 0.4] + [3.0] + [0.002] * (LEAST_OF - 1)
    assert len(runs) == WARM_RUNS + LEAST_OF
    for iteration, lost in enumerate(runs[:-1]):
        rental.sighted(iteration)
        rental.paid(lost)
    # 3 s a run over the 96 iterations left would repay it many times over: not yet known
    assert rental.ahead(100) > rental.estimate and not rental.due(100)
    rental.sighted(len(runs) - 1)
    rental.paid(runs[-1])
    assert rental.least == 0.002
    assert not rental.due(100)  # 0.002 a run: 0.2 s ahead, 0.008 s paid
    assert rental.due(1000)  # ... and over 995 iterations left, ~2 s


def test_a_loop_too_short_to_repay_g_declines_and_stops_copying(monkeypatch, copies):
    cost(monkeypatch, 1000.0)

    def program(loop):  # no Keras call: no hit on the tape
        w = tf.Variable(tf.ones((4, 2)))
        losses = []
        for x, _ in loop(data(16)):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(tf.constant(x)[:, :4], w)))
            (grad,) = tape.gradient(loss, [w])
            w.assign_sub(0.1 * grad)
            losses.append(float(loss))
        return losses, w.numpy()

    terra, _, _ = compare(program, {"regions": True})
    row = tape_row(terra)
    assert row.state == "tracing" and row.reason == "declined: its G would not repay its " \
        "formation before the loop ends", terra.regions
    assert not terra.learned.regions.tapes.table and terra.learned.regions.tapes.resting
    # declined: no tape copied after that
    assert copies and max(copies) < 12, copies
    assert len(copies) < 16


def test_a_declined_call_site_whose_tapes_take_hits_stays_copied(monkeypatch, copies):
    # the model's hits on the tape: a gradient summed across them is followed in eager's order
    # only over a copy, whatever the loop adds to the tape after the call site was declined
    cost(monkeypatch, 1000.0)
    terra, _, _ = compare(training(steps=16), {"regions": True})
    held = terra.learned.regions.tapes
    assert tape_row(terra).reason.startswith("declined") and held.resting, terra.regions
    assert held.eager.hit_taped and len(copies) == 16, copies


def test_a_loop_of_unknown_length_keeps_renting(monkeypatch, copies):
    cost(monkeypatch, 1000.0)
    batches = data(16)

    def program(loop):
        return training(batches=batches)(lambda it: loop(x for x in it))

    terra, _, _ = compare(program, {"regions": True})
    held = terra.learned.regions.tapes
    assert tape_row(terra).state == "tracing" and not held.declined
    assert not held.resting and max(copies) == 15  # every iteration's tape was copied


def test_g_forms_once_its_formation_pays_and_learns_its_cost(monkeypatch):
    cost(monkeypatch, 1e-6)  # due at a recording's second call; its real cost is ~10-100 ms
    terra, _, _ = compare(training(steps=16), {"regions": True})
    row = tape_row(terra)
    assert row.state == "formed" and row.hits >= 6, terra.regions
    tapes_ = terra.learned.regions.tapes
    assert tapes_.scale == 10.0  # measured far above the estimate: the scale's ceiling
    # the first iterations record the model's ops while its region forms: no G for them
    assert len(tapes_.table) == 1


def test_a_new_loop_tries_a_declined_call_site_again(monkeypatch):
    cost(monkeypatch, 1000.0)
    program = training(steps=12)
    terra, _, _ = compare(program, {"regions": True})
    assert tape_row(terra).reason.startswith("declined")
    cost(monkeypatch, 1e-6)
    again, _, _ = compare(program, {"regions": True, "learned": terra.learned})
    assert tape_row(again).state == "formed", again.regions


def test_g_due_while_co_executing_forms_in_the_next_iteration_run_for_real(
        monkeypatch, formed_in):
    cost(monkeypatch, 1e-6)
    terra, _, _ = compare(training(steps=16), {"regions": True})
    assert tape_row(terra).state == "formed", terra.regions
    # G's first call, a new op, in a co-executed iteration would have been a fallback: its call
    # that came due there asked for the next iteration to run for real, where G formed
    assert not tuple(terra.explain()) and formed_in, terra.explain()
    for iteration in formed_in:
        stats = terra.stats[iteration]
        assert stats.phase == "tracing" and stats.regions_forming, stats
        assert terra.stats[iteration - 1].phase == "coexec"


def function_on_the_tape(loop):
    """The model's call inside a user's tf.function: an op with its own gradient function on the
    tape, which the copy cannot see."""
    net, opt = MODELS["sequential"](), OPTIMIZERS["sgd-momentum"]()
    forward = tf.function(lambda x: net(x, training=True))
    losses = []
    for x, _ in loop(data(16)):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(forward(x)))
        grads = tape.gradient(loss, net.trainable_variables)
        opt.apply_gradients(zip(grads, net.trainable_variables))
        losses.append(float(loss))
    return losses, state_of(net, opt)


@pytest.mark.parametrize("length", [True, False])
def test_a_call_site_the_copy_cannot_see_is_declined_and_stops_copying(copies, length):
    def program(loop):
        return function_on_the_tape(loop if length else lambda it: loop(x for x in it))

    terra, _, _ = compare(program, {"regions": True})
    row = tape_row(terra)
    assert row.reason.startswith("declined: the copy cannot see an op with its own gradient"), row
    held = terra.learned.regions.tapes
    assert held.resting and not held.table
    # three calls the copy could not see, then no tape copied (with or without the loop's
    # length), and the row says why there is no G
    assert len(copies) == 3 and max(copies) < 8, copies


def test_a_deferred_g_forms_though_its_deferring_call_lowered_its_rent(monkeypatch):
    # the call that found G due paid its own rent after: its least rent may have dropped below
    # due by the next call (the quickstart formed G in a later co-executed iteration then, a
    # fallback, on 1 run in 4). Due once here, never again: it forms all the same, no fallback.
    cost(monkeypatch, 1e-6)
    original, answers = Rental.due, []

    def due_once(self, horizon, scale=1.0):
        answer = original(self, horizon, scale) and not any(answers)
        answers.append(answer)
        return answer

    monkeypatch.setattr(Rental, "due", due_once)
    terra, _, _ = compare(training(steps=16), {"regions": True})
    assert tape_row(terra).state == "formed" and answers.count(True) == 1, terra.regions
    assert not tuple(terra.explain()), terra.explain()


def test_a_call_awaited_in_an_iteration_run_for_real_may_skip_one(monkeypatch, formed_in):
    # two batch sizes in turn: the iteration run for real after a model region formed, or after
    # a tape's G came due while co-executing, is the other size's. Its first call came
    # co-executed, a fallback (the model's region at iteration 6; rnn-varlen's G, over four
    # lengths, in every run of the benchmark). Iterations go on running for real until it comes.
    cost(monkeypatch, 1e-6)
    batches = data(24, sizes={i: 8 for i in range(1, 24, 2)})
    terra, _, _ = compare(training(batches=batches), {"regions": True})
    assert tape_row(terra).state == "formed", terra.regions
    assert len(terra.learned.regions.tapes.table) == 2  # one G a batch size
    assert not tuple(terra.explain()), terra.explain()
    assert all(terra.stats[i].phase == "tracing" for i in formed_in), formed_in
