"""Background compiles (``coexec/compiler.py``): a segment's function is built on the Compiler's
thread and instantiated by a dry call, behind an ``If`` whose false side runs nothing of it. The
dry call must leave every effect undone (variables, random state, output); real calls through the
guard give what the plain function gives. Python going on meanwhile: test_compile_policy.py."""

import threading
import time

import numpy as np
import tensorflow as tf

from terra_nb.coexec import compiler
from terra_nb.coexec.compiler import Compiler, GuardedCall, compile_function, dry_run
from terra_nb.coexec.lower import FunctionCall, Segment, SegmentOp

F32, MUL = (("dtype", tf.float32),), (("T", tf.float32),)
RANDOM = (("seed", 7), ("seed2", 3), ("dtype", tf.float32), ("T", tf.int32))


def effects() -> Segment:
    """v <- v * x; a stateful random draw; a print: every kind of effect a dry call must not
    have. Returns the product and the draw."""
    return Segment(
        ops=(
            SegmentOp(0, "ReadVariableOp", F32, (("var", 1, 0),), 1),
            SegmentOp(1, "Mul", MUL, (("op", 0, 0), ("arg", 0, 0)), 1),
            SegmentOp(2, "AssignVariableOp", F32 + (("validate_shape", False),),
                      (("var", 1, 0), ("op", 1, 0)), 0),
            SegmentOp(3, "RandomUniform", RANDOM, (("arg", 1, 0),), 1),
            SegmentOp(4, "PrintV2", (("output_stream", "stderr"), ("end", "\n")),
                      (("arg", 2, 0),), 0),
        ),
        args=(("float32", (2,)), ("int32", (1,)), ("string", ())),
        returns=((1, 0), (3, 0)),
    )


ARGS = (tf.constant([2.0, 3.0]), tf.constant([4]), tf.constant("terra printed this"))


def test_a_dry_call_has_no_effect_and_the_guarded_call_gives_the_plain_ones_values(capfd):
    v, plain_v = tf.Variable([1.0, 1.0]), tf.Variable([1.0, 1.0])
    guarded = dry_run(compile_function(effects(), {1: v.handle}), effects())
    assert isinstance(guarded, GuardedCall)
    assert v.numpy().tolist() == [1.0, 1.0]  # no write
    assert "terra printed this" not in capfd.readouterr().err  # no print
    plain = compile_function(effects(), {1: plain_v.handle})
    for _ in range(2):
        ours, theirs = guarded(*ARGS), plain(*ARGS)
        # the draws equal a fresh kernel's: the dry call drew nothing
        assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(ours, theirs))
    assert v.numpy().tolist() == plain_v.numpy().tolist() == [4.0, 9.0]
    assert capfd.readouterr().err.count("terra printed this") == 4


def test_a_segment_returning_a_resource_is_not_guarded():
    v = tf.Variable(1.0)
    segment = Segment(ops=(SegmentOp(0, "Identity", (("T", tf.resource),), (("var", 1, 0),), 1),),
                      args=(), returns=((0, 0),))
    call = compile_function(segment, {1: v.handle})
    assert dry_run(call, segment) is call  # a branch of constants has no resource to give


def test_the_compiler_compiles_in_order_off_the_callers_thread_and_close_drops_the_rest(
        monkeypatch):
    threads, original = [], compiler.compile_segment

    def slow(*args, **kwargs):
        threads.append(threading.current_thread().name)
        time.sleep(0.2)
        return original(*args, **kwargs)

    monkeypatch.setattr(compiler, "compile_segment", slow)
    v = tf.Variable([1.0, 1.0])
    work = Compiler({1: v.handle})
    work.ask(("a",), effects())
    work.ask(("a",), effects())  # asked once until taken
    assert work.asked(("a",)) and work.take(("a",)) is None  # not done yet: the caller goes on
    work.wait()
    function, seconds = work.take(("a",))
    assert isinstance(function, FunctionCall) and seconds >= 0.2 and not work.asked(("a",))
    assert threads == ["terra-compiler"] and v.numpy().tolist() == [1.0, 1.0]
    for key in ("b", "c", "d"):
        work.ask((key,), effects())
    time.sleep(0.05)
    work.close()  # "b" is being compiled: it finishes; the rest never starts
    assert threads == ["terra-compiler"] * 2 and work.count == 4
