"""A module of settings a test layer holds in an attribute (``self.held = held_config``) and
reads as ``self.held.GAIN``: the guard compares a user module's names however it is reached
(``tests/tf/test_region_state_walk.py``)."""

GAIN = 1.0
