"""The constraint methods every System has (Drake's ``System<T>`` constraint API): ``add_constraint``,
``check_constraints``, the constraint equations and their overridable ``do_*`` points.

`SystemConstraints` is a field-less base class of [`System`][jaxsys.System]; its methods use the
System's ``_spec`` and validation methods.

Imports (within jaxsys): ``constraints``, ``context``, ``errors``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .constraints import SystemConstraint, SystemConstraintIndex
from .context import Context
from .errors import ConstraintError


@dataclasses.dataclass(frozen=True)
class ConstraintReport:
    """The result of `System.check_constraints`: one row per constraint."""

    rows: list[tuple[SystemConstraint, np.ndarray, float]]
    tol: float

    def __bool__(self) -> bool:
        return all(v <= self.tol for _, _, v in self.rows)

    def violated(self) -> list[SystemConstraint]:
        """The constraints violated by more than ``tol``."""
        return [c for c, _, v in self.rows if v > self.tol]

    def __str__(self) -> str:
        lines = [f"{len(self.rows)} constraint(s), tolerance {self.tol:g}:"]
        for c, value, v in self.rows:
            status = "ok" if v <= self.tol else "VIOLATED"
            lines.append(
                f"  [{status}] {c.description()} on {c.get_system_path()}: "
                f"value {np.array2string(value, precision=6)}, "
                f"bounds [{c.lower_text()}, {c.upper_text()}], violation {v:.3g}"
            )
        return "\n".join(lines)

    __repr__ = __str__


class SystemConstraints(eqx.Module):
    """Constraint methods of [`System`][jaxsys.System] (a base class without fields)."""

    if TYPE_CHECKING:  # (provided by System, which this base is mixed into)
        _spec: Any

        def validate_context(self, context: Any) -> None: ...

        def get_system_id_string(self) -> str: ...

        def _calc_time_derivatives_raw(self, context: Context) -> jax.Array: ...

    # ===== constraints =========================================================================
    def add_constraint(self, constraint: SystemConstraint) -> SystemConstraintIndex:
        """Add a SystemConstraint to this system (Drake: ``AddConstraint``); returns its index."""
        if not isinstance(constraint, SystemConstraint):
            raise ConstraintError(
                f"add_constraint on System {self.get_system_id_string()} expects a SystemConstraint, "
                f"got {type(constraint).__name__}."
            )
        self._spec.constraints.append(constraint)
        constraint._attach(cast(Any, self))
        return SystemConstraintIndex(len(self._spec.constraints) - 1)

    def num_constraints(self) -> int:
        """Number of constraints (Drake: ``num_constraints``)."""
        return len(self._all_constraints())

    get_num_constraints = num_constraints

    def _all_constraints(self) -> list[tuple[SystemConstraint, Callable[[Context], Context]]]:
        """(constraint, map from this system's context to the constraint system's context)."""
        return [(c, lambda ctx: ctx) for c in self._spec.constraints]

    def get_constraint(self, index: int) -> SystemConstraint:
        """Constraint ``index`` (Drake: ``get_constraint``)."""
        cons = self._all_constraints()
        if not 0 <= int(index) < len(cons):
            raise ConstraintError(
                f"System {self.get_system_id_string()} has {len(cons)} constraint(s); index {index} is out of range."
            )
        return cons[int(index)][0]

    def check_constraints(self, context: Context, tol: float = 1e-6) -> ConstraintReport:
        """Evaluate every constraint (of this system and, for a Diagram, its subsystems).

        Returns a [`ConstraintReport`][jaxsys.ConstraintReport] listing each constraint with its value, bounds and
        violation; ``bool(report)`` is True when all are satisfied within ``tol``.
        """
        self.validate_context(context)
        rows = []
        for c, to_ctx in self._all_constraints():
            value = np.asarray(c.calc(to_ctx(context)))
            rows.append((c, value, float(c.violation(value))))
        return ConstraintReport(rows, tol)

    def check_system_constraints_satisfied(self, context: Context, tol: float = 1e-6) -> bool:
        """True if every constraint holds within ``tol`` (Drake: ``CheckSystemConstraintsSatisfied``)."""
        return bool(self.check_constraints(context, tol))

    # Drake's older constraint-equation API (for systems with bilateral constraints).
    def get_num_constraint_equations(self, context: Context) -> int:
        """Number of constraint equations g(q, v) = 0 (Drake: ``get_num_constraint_equations``)."""
        return int(np.shape(self.eval_constraint_equations(context))[0])

    def eval_constraint_equations(self, context: Context) -> jax.Array:
        """g(q, v) (Drake: ``EvalConstraintEquations``); override ``do_eval_constraint_equations``."""
        self.validate_context(context)
        return jnp.asarray(self.do_eval_constraint_equations(context))

    def eval_constraint_equations_dot(self, context: Context) -> jax.Array:
        """dg/dt (Drake: ``EvalConstraintEquationsDot``).

        The default differentiates `eval_constraint_equations` along the state trajectory
        with ``jax.jvp`` (direction xdot, time rate 1); override ``do_eval_constraint_equations_dot``
        to give it in closed form.
        """
        self.validate_context(context)
        return jnp.asarray(self.do_eval_constraint_equations_dot(context))

    def calc_velocity_change_from_constraint_impulses(self, context: Context, J: Any, lam: Any) -> jax.Array:
        """Δv from constraint impulses λ through the constraint Jacobian J (Drake: same name).

        The default assumes a unit generalized inertia: Δv = Jᵀ λ. Override
        ``do_calc_velocity_change_from_constraint_impulses`` for Δv = M⁻¹ Jᵀ λ.
        """
        self.validate_context(context)
        return jnp.asarray(self.do_calc_velocity_change_from_constraint_impulses(context, J, lam))

    def calc_constraint_error_norm(self, context: Context, error: Any) -> jax.Array:
        """Norm of a constraint error vector (Drake: ``CalcConstraintErrorNorm``); default 2-norm."""
        self.validate_context(context)
        return jnp.asarray(self.do_calc_constraint_error_norm(context, error))

    def do_eval_constraint_equations(self, context: Context) -> jax.Array:
        """Override point for `eval_constraint_equations`; default: no equations."""
        return jnp.zeros((0,), context.time.dtype)

    def do_eval_constraint_equations_dot(self, context: Context) -> jax.Array:
        """Override point for `eval_constraint_equations_dot`; default: a ``jax.jvp``."""
        x = context.get_continuous_state_vector()
        xdot = self._calc_time_derivatives_raw(context)

        def g(x_: jax.Array, t_: jax.Array) -> jax.Array:
            return self.do_eval_constraint_equations(context.with_continuous_state(x_).with_time(t_))

        _, gdot = jax.jvp(g, (x, context.time), (xdot, jnp.ones_like(context.time)))
        return gdot

    def do_calc_velocity_change_from_constraint_impulses(self, context: Context, J: Any, lam: Any) -> jax.Array:
        """Override point; default Jᵀ λ (unit inertia)."""
        J = jnp.asarray(J)
        lam = jnp.asarray(lam)
        if J.ndim != 2 or lam.shape != (J.shape[0],):
            raise ConstraintError(
                f"calc_velocity_change_from_constraint_impulses on System "
                f"{self.get_system_id_string()}: J must be (m, num_v) and lambda (m,); got "
                f"J {J.shape} and lambda {lam.shape}."
            )
        return J.T @ lam

    def do_calc_constraint_error_norm(self, context: Context, error: Any) -> jax.Array:
        """Override point; default Euclidean norm."""
        return jnp.linalg.norm(jnp.asarray(error))
