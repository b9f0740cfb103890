"""The paper's ten programs (Terra, NeurIPS 2021), small and on synthetic data.

Every program module has one shape, so that ``benchmarks/paper.py`` can drive it in every mode:

- ``make(seed) -> State``: models, optimizers and synthetic data, all from ``seed``;
- ``batch(state, i) -> tuple``: the input pipeline of iteration ``i`` (numpy and Python values);
- ``train_step(state, *batch)``: the training step, the function a user would wrap in
  ``tf.function`` (imperative Python allowed, as in the original);
- ``log(state, i, out)`` (optional): Python the loop body runs on the step's result;
- ``FUNCTION_WHY``: why ``tf.function`` of ``train_step`` fails or differs (paper Table 1),
  or None where it should work.

``common.step(program, state, i)`` is one loop iteration and ``common.weights(state)`` the
values compared across modes.
"""

from __future__ import annotations

import importlib
from types import ModuleType

NAMES = ("dropblock", "bert_qa", "music_transformer", "sdpoint", "bert_cls", "gpt2", "dcgan",
         "resnet50", "faster_rcnn", "yolov3")


def load(name: str) -> ModuleType:
    """The program module called ``name`` (one of ``NAMES``)."""
    if name not in NAMES:
        raise ValueError(f"unknown program {name!r}; choose one of {', '.join(NAMES)}")
    return importlib.import_module(f"{__name__}.{name}")
