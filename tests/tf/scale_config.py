"""A module of settings a test layer reads as ``scale_config.SCALE`` (a module attribute, which
the region's guard compares on every hit: ``tests/tf/test_region_python_state.py``)."""

SCALE = 2.0
