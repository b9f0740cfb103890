"""The exported graph of a real loop shows the user's program (issue 40): a Keras MLP trained by
hand, batches of 8 and 16 (each batch size takes both ways of the ``if``), one ``if`` on a
fetched loss and an inner ``for p, g in zip(params, grads)`` loop. Its JSON (what every view
reads) has exactly one user branch, at the ``if``'s line, also when a second Terra reuses what
the first learned (a cell run again); the inner loop as a loop node; the model call's region
versions with labels that differ; and the variables by their Keras names."""

import json
import re
from pathlib import Path

import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
np = pytest.importorskip("numpy")

import terra_nb  # noqa: E402

IF_LINE = next(i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1)
               if line.strip().startswith("if float(loss) > 4.0:"))
HERE = Path(__file__).name


def _train(model, data, learned=None):
    params = model.trainable_variables
    with terra_nb.Terra(learned=learned) as terra:
        for step in terra.loop(range(40)):
            x, y = data[step % 4]  # each batch size both ways of the if
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x) - y) ** 2)
            grads = tape.gradient(loss, params)
            if float(loss) > 4.0:
                grads = [g * 0.5 for g in grads]
            for p, g in zip(params, grads):
                p.assign_sub(0.01 * g)
    return terra


@pytest.fixture(scope="module")
def runs():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    rng = np.random.default_rng(0)
    data = [(rng.normal(size=(n, 4)).astype("float32"),
             (rng.normal(size=(n, 1)) + shift).astype("float32"))
            for n, shift in ((8, 4.0), (16, 4.0), (8, 0.0), (16, 0.0))]
    first = _train(model, data)
    again = _train(model, data, learned=first.learned)
    paths = {v.path for v in model.trainable_variables}  # dense/kernel ... (numbered by Keras)
    return json.loads(first.graph.to_json()), json.loads(again.graph.to_json()), paths


@pytest.mark.parametrize("run", [0, 1], ids=["first", "run-again"])
def test_one_user_branch_at_the_if_line(runs, run):
    data = runs[run]
    users = [b for b in data["branches"] if b["kind"] == "if"]
    assert len(users) == 1, users
    assert users[0]["location"] == f"{HERE}:{IF_LINE}"
    assert users[0]["text"] == "if float(loss) > 4.0:"
    assert {label for _, _, label in users[0]["arms"]} == {"true", "false"}
    explained = {b for site in data["branches"] if site["kind"] != "op"
                 for b, _, _ in site["arms"]}
    assert set(data["branch_points"]) <= explained  # no divergence drawn as a bare op


def test_the_inner_loop_is_a_loop_not_a_case(runs):
    """``for p, g in zip(params, grads)``: a loop node; its body parts at the start (each
    parameter's ops have its shape), and that parting is the loop's spec variants, labelled by
    the shapes, never a case."""
    data = runs[0]
    zip_line = IF_LINE + 2
    (loop,) = [n for n in data["nodes"]
               if n["kind"] == "loop" and n["location"] == f"{HERE}:{zip_line}"]
    assert loop["trip_counts"] == [4]
    start = loop["body"][0]
    (site,) = [b for b in data["branches"] if b["arms"][0][0] == start]
    assert site["kind"] == "specs"
    assert sorted(label for _, _, label in site["arms"]) == sorted(
        ["f32[4,16]", "f32[16]", "f32[16,1]", "f32[1]"])


def test_region_versions_have_labels_that_differ(runs):
    data = runs[0]
    forward = {n["id"] for n in data["nodes"]
               if data["region_calls"].get(n["op_type"], {}).get("kind") == "forward"
               and "Sequential" in data["region_calls"][n["op_type"]]["name"]}
    labels = [data["variant_labels"][str(i)] for i in sorted(forward)]
    assert len(set(labels)) == len(labels) >= 2, labels
    assert any("f32[8,4]" in t for t in labels) and any("f32[16,4]" in t for t in labels)


def test_variables_carry_their_keras_names(runs):
    names = set(runs[0]["variables"].values())
    assert runs[2] <= names and any(re.search(r"dense(_\d+)?/kernel$", n) for n in names), names


def test_tensorflow_variables_by_their_name_or_the_python_name_holding_them():
    """A ``tf.Variable`` left with TensorFlow's default name reads as the Python name that
    holds it (``W``, ``params[1]``); a named one as its name."""
    W = tf.Variable(tf.ones((3, 3)))  # noqa: N806 - a weight matrix, as users name it
    params = [tf.Variable(tf.ones((3,))), tf.Variable(tf.ones((3,)), name="bias")]
    with terra_nb.Terra(mode="trace") as terra:
        for _ in terra.loop(range(3)):
            h = tf.matmul(W, W) + params[0] + params[1]
            W.assign(h / 9.0)
    names = set(dict(terra.graph.variables).values())
    assert names == {"W", "params[0]", "bias"}, names
    assert "var:W" in repr(terra.graph)
