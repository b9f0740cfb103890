"""What a saved notebook keeps of a view (``terra_nb/views/saved.py``): every widget's bundle is
marked, and saving drops the widget mimetype of marked outputs that carry a picture, with their
widget state; other widgets stay. The pre-save hook does this to a notebook the server saves."""

import copy

import pytest
from view_fixtures import make_graph, make_spans_and_stats

from kernel_ext.save_hook import keep_view_pictures
from terra_nb.views.saved import MARK, WIDGET_STATE, WIDGET_VIEW, keep_pictures, keeps_widgets

PNG = "image/png"


def _output(model_id: str, marked: bool, picture: bool = True) -> dict:
    data = {"text/plain": "view", WIDGET_VIEW: {"model_id": model_id, "version_major": 2}}
    if picture:
        data[PNG] = "iVBOR"
    metadata = {MARK: {"saved_as": "picture"}} if marked else {}
    return {"output_type": "display_data", "data": data, "metadata": metadata}


def _notebook() -> dict:
    state = {
        "ours": {"state": {"layout": "IPY_MODEL_ours-layout"}},
        "ours-layout": {"state": {}},
        "slider": {"state": {"layout": "IPY_MODEL_slider-layout"}},
        "slider-layout": {"state": {}},
    }
    return {
        "cells": [{"cell_type": "code", "outputs": [
            _output("ours", marked=True), _output("slider", marked=False),
            _output("bare", marked=True, picture=False)]}],
        "metadata": {"widgets": {WIDGET_STATE: {"state": state}}},
    }


def test_views_are_saved_as_their_pictures():
    nb = _notebook()
    assert keep_pictures(nb) == 1
    ours, slider, bare = nb["cells"][0]["outputs"]
    assert WIDGET_VIEW not in ours["data"] and PNG in ours["data"]
    assert WIDGET_VIEW in slider["data"]  # another library's widget: as it was
    assert WIDGET_VIEW in bare["data"]  # no picture to show instead
    state = nb["metadata"]["widgets"][WIDGET_STATE]["state"]
    assert set(state) == {"slider", "slider-layout"}
    assert keeps_widgets(nb) == ["bare"]
    assert keep_pictures(nb) == 0  # saving again changes nothing


def test_the_pre_save_hook_changes_notebooks_only():
    nb = _notebook()
    keep_view_pictures(model={"type": "notebook", "content": nb}, path="a.ipynb")
    assert WIDGET_VIEW not in nb["cells"][0]["outputs"][0]["data"]
    text = {"type": "file", "content": copy.deepcopy(nb)}
    keep_view_pictures(model=text, path="a.txt")
    assert text["content"] == nb


@pytest.mark.usefixtures("needs_dot")
def test_every_widget_bundle_is_marked():
    pytest.importorskip("anywidget")
    from terra_nb.views import Dashboard, GraphView, TimelineView

    spans, stats = make_spans_and_stats()
    for view in (GraphView(make_graph()), TimelineView(spans, stats), Dashboard()):
        data, metadata = view._repr_mimebundle_()
        assert WIDGET_VIEW in data and PNG in data
        assert metadata[MARK] == {"saved_as": "picture"}
