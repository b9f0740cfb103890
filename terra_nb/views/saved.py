"""What a saved notebook keeps of a live view: its picture.

Every view output carries the widget (``application/vnd.jupyter.widget-view+json``) and the same
drawing as ``image/png`` and ``image/svg+xml``. A front end prefers the widget; once the kernel
that held the widget's model is gone, JupyterLab and Notebook 7 draw "Error displaying widget:
model not found" for a trusted notebook whose widget state was not saved (their default). So a
notebook is saved without the widget mimetype of a terra-nb view: ``keep_pictures`` drops it
(and the state of those widgets), and every front end then shows the picture. It runs where the
notebook is written: the Jupyter server's pre-save hook (``kernel_ext/save_hook.py``) and the
headless runner (``kernel_ext/run_notebook.py``).

Plain JSON in, plain JSON out: no IPython, no anywidget.
"""

from __future__ import annotations

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
PICTURES = ("image/png", "image/svg+xml")
MARK = "terra_nb"  # the output metadata key a terra-nb view sets


def picture_metadata(metadata: dict | None = None) -> dict:
    """``metadata`` (an output's) marked as a terra-nb view that is saved as its picture."""
    return {**(metadata or {}), MARK: {"saved_as": "picture"}}


def _is_view(output: dict) -> bool:
    data = output.get("data") or {}
    marked = (output.get("metadata") or {}).get(MARK, {}).get("saved_as") == "picture"
    return marked and WIDGET_VIEW in data and any(p in data for p in PICTURES)


def keep_pictures(notebook: dict) -> int:
    """Drop the widget mimetype of every terra-nb view output of ``notebook`` (nbformat 4 JSON,
    changed in place) that has a picture, and the saved state of those widgets; returns how many
    outputs changed. Other widgets and outputs are left as they are."""
    dropped: set[str] = set()
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []) or []:
            if output.get("output_type") in ("display_data", "execute_result") and _is_view(
                output
            ):
                view = output["data"].pop(WIDGET_VIEW)
                dropped.add(view.get("model_id", "") if isinstance(view, dict) else "")
    _drop_state(notebook, dropped)
    return len(dropped)


def _drop_state(notebook: dict, models: set[str]) -> None:
    """Remove ``models`` from the notebook's saved widget state (the key goes when empty)."""
    widgets = (notebook.get("metadata") or {}).get("widgets") or {}
    state = (widgets.get(WIDGET_STATE) or {}).get("state")
    if not models or not isinstance(state, dict):
        return
    for model_id in models:
        model = state.pop(model_id, None) or {}
        for child in _children(model.get("state", {})):  # its layout and style models
            state.pop(child, None)
    if not state:
        notebook["metadata"].pop("widgets", None)


def _children(value: object) -> list[str]:
    """The model ids a widget's state refers to (``"IPY_MODEL_<id>"``)."""
    if isinstance(value, str):
        return [value[len("IPY_MODEL_"):]] if value.startswith("IPY_MODEL_") else []
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [child for item in value for child in _children(item)]
    return []


def keeps_widgets(notebook: dict) -> list[str]:
    """The model ids of terra-nb views ``notebook`` still shows as widgets (for checks)."""
    return [
        output["data"][WIDGET_VIEW].get("model_id", "")
        for cell in notebook.get("cells", [])
        for output in cell.get("outputs", []) or []
        if MARK in (output.get("metadata") or {}) and WIDGET_VIEW in (output.get("data") or {})
    ]

