"""System constraints (Drake's ``SystemConstraint``): equalities g(context) = 0 and inequalities
lower <= g(context) <= upper that a context should satisfy (e.g. a unit quaternion, joint limits).

Constraints are static structure declared on a system (``LeafSystem.declare_equality_constraint``,
``declare_inequality_constraint`` or ``System.add_constraint``); a Diagram reports the
constraints of all its subsystems. Checking is done on a concrete context and produces a report.

Imports (within jaxsys): ``context``, ``errors``, ``system``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from .errors import ConstraintError


if TYPE_CHECKING:
    from .context import Context
    from .system import System


class SystemConstraintIndex(int):
    """Index of a constraint in its system (Drake: ``SystemConstraintIndex``)."""


class SystemConstraint:
    """A constraint lower <= calc(context) <= upper (equality: lower = upper = 0).

    **Arguments:**
    - `calc`: ``f(context) -> 1-D array`` of size ``count`` (a bound method of the system, or any
      function of its context).
    - `lower`, `upper`: bounds (arrays of size ``count``; ``-inf``/``inf`` for one-sided).
    - `description`: text used in reports and errors.
    """

    def __init__(
        self,
        calc: Callable[[Context], Any],
        lower: Any,
        upper: Any,
        description: str,
    ) -> None:
        if not callable(calc):
            raise ConstraintError(f"SystemConstraint {description!r}: calc must be callable.")
        lo = np.atleast_1d(np.asarray(lower, dtype=float))
        hi = np.atleast_1d(np.asarray(upper, dtype=float))
        if lo.shape != hi.shape or lo.ndim != 1:
            raise ConstraintError(
                f"SystemConstraint {description!r}: lower and upper must be 1-D of the same size; "
                f"got {lo.shape} and {hi.shape}."
            )
        if np.any(lo > hi):
            raise ConstraintError(f"SystemConstraint {description!r}: lower > upper somewhere.")
        self._calc = calc
        self._lower = lo
        self._upper = hi
        self._description = description
        self._system: System | None = None

    def _attach(self, system: System) -> None:
        self._system = system

    def size(self) -> int:
        """Number of scalar constraints (Drake: ``size``)."""
        return int(self._lower.shape[0])

    def description(self) -> str:
        """The description (Drake: ``description``)."""
        return self._description

    def is_equality_constraint(self) -> bool:
        """True when lower == upper == 0 (Drake: ``is_equality_constraint``)."""
        return bool(np.all(self._lower == 0) and np.all(self._upper == 0))

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) (Drake: ``bounds``)."""
        return self._lower, self._upper

    def lower_text(self) -> str:
        """The lower bound, formatted."""
        return np.array2string(self._lower, precision=6)

    def upper_text(self) -> str:
        """The upper bound, formatted."""
        return np.array2string(self._upper, precision=6)

    def get_system_path(self) -> str:
        """Path of the system this constraint belongs to."""
        return self._system.get_path() if self._system is not None else "<unattached>"

    def calc(self, context: Context) -> jax.Array:
        """The constraint value g(context), shape ``(size,)`` (Drake: ``Calc``)."""
        if self._system is not None:
            self._system.validate_context(context)
        fn: Any = self._calc
        owner = getattr(fn, "__self__", None)
        if owner is not None and self._system is not None and owner is self._system:
            value = fn.__func__(self._system, context)
        else:
            value = fn(context)
        value = jnp.atleast_1d(jnp.asarray(value))
        if value.shape != self._lower.shape:
            raise ConstraintError(
                f"Constraint {self._description!r} of System {self.get_system_path()} returned shape "
                f"{value.shape}; it was declared with {self.size()} element(s)."
            )
        return value

    def violation(self, value: Any) -> float:
        """Largest amount by which ``value`` leaves [lower, upper] (0 if inside)."""
        v = np.asarray(value, dtype=float)
        below = np.maximum(self._lower - v, 0.0)
        above = np.maximum(v - self._upper, 0.0)
        return float(np.max(np.concatenate([below, above, [0.0]])))

    def check_satisfied(self, context: Context, tol: float = 1e-6) -> bool:
        """True if the constraint holds within ``tol`` at ``context`` (Drake: ``CheckSatisfied``)."""
        return self.violation(self.calc(context)) <= tol
