"""What ``Terra(...)`` accepts: one check, naming the first option that is off; and the one
warning an option earns (``xla``: its numerics are not eager's)."""

from __future__ import annotations

import warnings

from .errors import TerraUsageError
from .modes import Learned

MODES = ("coexec", "lazy", "trace", "eager")


def check_options(mode, max_fallbacks, compile_after, program, keep_spans, learned,
                   regions=None) -> None:
    """Raise ``TerraUsageError`` naming the first option of ``Terra(...)`` that is off."""
    if mode not in MODES:
        raise TerraUsageError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    for name, value in (("max_fallbacks", max_fallbacks), ("compile_after", compile_after),
                        ("keep_spans", keep_spans)):
        if not isinstance(value, int) or value < 1:
            raise TerraUsageError(f"{name} must be an int >= 1, got {value!r}")
    if program not in ("segments", "whole"):
        raise TerraUsageError(f"program must be 'segments' or 'whole', got {program!r}")
    if program == "whole" and mode != "coexec":
        raise TerraUsageError(f"program='whole' needs mode='coexec', not {mode!r}")
    if learned is not None and not isinstance(learned, Learned):
        raise TerraUsageError("learned= takes the .learned of an earlier Terra")
    if regions is not None and not isinstance(regions, bool) and regions != "calls":
        raise TerraUsageError(f"regions must be True, False, None or 'calls', got {regions!r}")
    if regions and program == "whole":
        raise TerraUsageError("regions=True needs program='segments' for now: the whole program "
                              "leaves its plan at every region (a function-call op Python runs)")


XLA_NUMERICS = (
    "terra-nb: xla=True compiles the graph segments with XLA, whose fused kernels may sum "
    "floating-point values in another order than eager: results can differ from eager in the "
    "last bits (and grow apart over many steps); without --xla they are eager's, bit for bit")
_xla_warned: list[bool] = []


def warn_xla_once() -> None:
    """Say once per process that XLA's numerics are not eager's."""
    if not _xla_warned:
        _xla_warned.append(True)
        warnings.warn(XLA_NUMERICS, RuntimeWarning, stacklevel=3)
