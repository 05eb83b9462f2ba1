"""Transfer functions of single-input single-output linear systems, continuous (s) and discrete (z), and
their state-space realizations (the role of Drake's ``TransferFunction`` and of MATLAB's / SciPy's
``tf2ss`` / ``ss2tf``).

Imports (within jaxsys): the framework's ``errors``; ``primitives/linear``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..framework.errors import JaxsysError
from .linear import LinearSystem


@dataclasses.dataclass(frozen=True)
class TransferFunction:
    """H = num / den, polynomials in s (``time_step == 0``) or z (``time_step > 0``, seconds), with
    coefficients in decreasing powers (``[1, 2]`` is s + 2). Proper (deg num <= deg den) for a
    realization. SISO; Drake's ``TransferFunction`` (s or z, ``time_step``)."""

    num: tuple[float, ...]
    den: tuple[float, ...]
    time_step: float = 0.0

    def __init__(self, num: Any, den: Any, time_step: float = 0.0) -> None:
        num = np.trim_zeros(np.atleast_1d(np.asarray(num, float)), "f")
        den = np.trim_zeros(np.atleast_1d(np.asarray(den, float)), "f")
        if den.size == 0:
            raise JaxsysError("TransferFunction: the denominator is zero.")
        if num.size == 0:
            num = np.zeros(1)
        if not (np.all(np.isfinite(num)) and np.all(np.isfinite(den))):
            raise JaxsysError("TransferFunction: coefficients must be finite.")
        if time_step < 0:
            raise JaxsysError(f"TransferFunction: time_step must be >= 0; got {time_step}.")
        object.__setattr__(self, "num", tuple(float(c) for c in num))
        object.__setattr__(self, "den", tuple(float(c) for c in den))
        object.__setattr__(self, "time_step", float(time_step))

    def evaluate(self, s: complex) -> complex:
        """H at the complex point s (or z)."""
        return complex(np.polyval(self.num, s) / np.polyval(self.den, s))

    def to_state_space(self, name: str = "") -> LinearSystem:
        """A minimal-order realization in controllable canonical form as a [`LinearSystem`][jaxsys.LinearSystem]
        (discrete with period ``time_step`` for a z transfer function). Raises for an improper H."""
        num, den = np.asarray(self.num), np.asarray(self.den)
        if num.size > den.size:
            raise JaxsysError(
                f"TransferFunction.to_state_space: H is improper (numerator degree {num.size - 1} > "
                f"denominator degree {den.size - 1}); no state-space realization exists."
            )
        a0 = den[0]
        den, num = den / a0, np.concatenate([np.zeros(den.size - num.size), num]) / a0
        n = den.size - 1
        D = np.array([[num[0]]])
        if n == 0:
            return LinearSystem(
                np.zeros((0, 0)), np.zeros((0, 1)), np.zeros((1, 0)), D, time_period=self.time_step, name=name
            )
        # strictly proper part: num - D den
        r = num[1:] - num[0] * den[1:]
        A = np.zeros((n, n))
        A[0, :] = -den[1:]
        A[1:, :-1] = np.eye(n - 1)
        B = np.zeros((n, 1))
        B[0, 0] = 1.0
        C = r[None, :]
        return LinearSystem(A, B, C, D, time_period=self.time_step, name=name)


def state_space_to_transfer_function(A: Any, B: Any, C: Any, D: Any, time_step: float = 0.0) -> TransferFunction:
    """H(s) = C (sI − A)⁻¹ B + D of a single-input single-output system (z for ``time_step > 0``):
    den = det(sI − A) (the characteristic polynomial), num = det(sI − A + B C) − det(sI − A) + D den."""
    A = np.atleast_2d(np.asarray(A, float)) if np.size(A) else np.zeros((0, 0))
    n = A.shape[0]
    B = np.asarray(B, float).reshape(n, -1)
    C = np.asarray(C, float).reshape(-1, n)
    D = np.atleast_2d(np.asarray(D, float))
    if B.shape[1] != 1 or C.shape[0] != 1 or D.shape != (1, 1):
        raise JaxsysError(
            f"state_space_to_transfer_function: single input and output only; got B {B.shape}, C {C.shape}, "
            f"D {D.shape}."
        )
    den = np.poly(A) if n else np.ones(1)
    num = (np.poly(A - B @ C) - den if n else np.zeros(1)) + D[0, 0] * den
    return TransferFunction(num, den, time_step)


__all__ = ["TransferFunction", "state_space_to_transfer_function"]
