"""A Jupyter server extension: notebooks are saved with terra-nb's views as pictures.

JupyterLab and Notebook 7 save a notebook through the Jupyter server; this extension adds a
pre-save hook there that drops the widget mimetype of terra-nb's view outputs (each keeps its
PNG and SVG; see ``terra_nb/views/saved.py``). Reopened after the kernel is gone, trusted or not,
in JupyterLab, Notebook 7, nbconvert or on GitHub, the notebook shows the pictures instead of
"Error displaying widget: model not found". While the kernel runs, the views stay live widgets.

Enabled by the file ``etc/jupyter/jupyter_server_config.d/terra_nb.json`` that installing
terra-nb puts next to the server (``jupyter server extension list`` shows it), or by hand:
``jupyter server extension enable kernel_ext.save_hook``. It imports neither TensorFlow nor
IPython.
"""

from __future__ import annotations

from typing import Any


def keep_view_pictures(model: dict, **kwargs: Any) -> None:
    """The pre-save hook: a notebook's terra-nb views are saved as their pictures."""
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    from terra_nb.views.saved import keep_pictures

    keep_pictures(model["content"])


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "kernel_ext.save_hook"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    serverapp.contents_manager.register_pre_save_hook(keep_view_pictures)
    serverapp.log.info("terra-nb: notebooks are saved with terra-nb's views as pictures")
