"""Linearization (Drake's ``Linearize``, ``FirstOrderTaylorApproximation``, in Drake's
systems/primitives/linear_system.h), computed with ``jax.jacfwd`` and differentiable end to end, and
the controllability / observability tests on (A, B, C) (``ControllabilityMatrix``, ``IsStabilizable``,
...). LQR and the Riccati equations are in `jaxsys.controllers`.

Imports (within jaxsys): the framework; ``primitives/linear``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context, DiscreteValues
from ..framework.dispatch import all_events, dispatch_discrete
from ..framework.errors import JaxsysError
from ..framework.events import DISCRETE_UPDATE, EventCollection, TriggerType
from ..framework.ports import vector_input_ports, vector_output_ports
from ..framework.system import System
from .linear import AffineSystem, LinearSystem


class NotEquilibriumError(JaxsysError, ValueError):
    """Linearize was asked for a time-invariant linearization at a point that is not an equilibrium."""


def input_output_ports(system: System, input_port_index: Any, output_port_index: Any) -> tuple[Any, Any]:
    """The (input, output) ports a linearization uses: by index or name, None for the first vector
    port if there is one (Drake's ``kUseFirstInputIfItExists``), ``"none"`` for no port."""

    def pick(ports: list[Any], which: Any, kind: str) -> Any:
        if which is None:  # Drake's kUseFirstInputIfItExists / kUseFirstOutputIfItExists
            return ports[0] if ports else None
        if isinstance(which, str) and which == "none":
            return None
        port = system.get_input_port(which) if kind == "input" else system.get_output_port(which)
        if port.is_abstract():
            raise JaxsysError(f"linearize: {port.get_full_description()} is abstract; a vector port is needed.")
        return port

    return (
        pick(vector_input_ports(system), input_port_index, "input"),
        pick(vector_output_ports(system), output_port_index, "output"),
    )


def _discrete_info(system: System, context: Context) -> tuple[bool, float | None]:
    """(is a discrete-time system?, its period)."""
    n_cont = context.num_continuous_states()
    n_groups = context.num_discrete_state_groups()
    if n_cont and n_groups:
        raise JaxsysError(
            f"linearize: System {system.get_system_id_string()} has both continuous and discrete state; "
            f"only purely continuous or purely discrete systems can be linearized (as in Drake)."
        )
    if not n_groups:
        return False, None
    periods = {
        e.period for _, e in all_events(system) if e.kind == DISCRETE_UPDATE and e.trigger is TriggerType.PERIODIC
    }
    if len(periods) != 1:
        raise JaxsysError(
            f"linearize: System {system.get_system_id_string()} has discrete state but {len(periods)} distinct "
            f"periodic discrete-update periods; exactly one is needed."
        )
    return True, periods.pop()


def _functions(system: System, context: Context, u_port: Any, y_port: Any, discrete: bool) -> tuple[Any, Any, Any, Any]:
    if discrete:
        n = context.num_discrete_state_groups()
        if n != 1:
            raise JaxsysError(f"linearize: the discrete system must have one discrete state group; it has {n}.")
        x0 = context.get_discrete_state(0)
        events = EventCollection(
            [
                e
                for e in system.get_periodic_events().get(DISCRETE_UPDATE).get_events()
                if e.trigger is TriggerType.PERIODIC
            ]
        )

        def with_x(ctx: Context, x: Any) -> Context:
            return ctx.with_discrete_state(DiscreteValues((x,), ctx.system_id))

        def dyn(ctx: Context) -> Any:
            return dispatch_discrete(system, ctx, events).groups[0]
    else:
        x0 = context.get_continuous_state_vector()

        def with_x(ctx: Context, x: Any) -> Context:
            return ctx.with_continuous_state(x)

        def dyn(ctx: Context) -> Any:
            return system._calc_time_derivatives_raw(ctx)

    u0 = u_port.eval(context) if u_port is not None else jnp.zeros((0,), x0.dtype)

    def at(x: Any, u: Any) -> Context:
        ctx = with_x(context, x)
        return u_port.fix_value(ctx, u) if u_port is not None else ctx

    def f(x: Any, u: Any) -> Any:
        return dyn(at(x, u))

    def g(x: Any, u: Any) -> Any:
        if y_port is None:
            return jnp.zeros((0,), x0.dtype)
        return y_port.eval(at(x, u))

    return x0, u0, f, g


def first_order_taylor_approximation(
    system: System, context: Context, input_port_index: Any = None, output_port_index: Any = None
) -> AffineSystem:
    """The affine approximation of ``system`` about the operating point in ``context``
    (Drake: ``FirstOrderTaylorApproximation``): ẋ ≈ A (x − x0) + B (u − u0) + f(x0, u0), written as
    ẋ = A x + B u + f0 with f0 = f(x0, u0) − A x0 − B u0, and similarly for y.

    ``input_port_index`` / ``output_port_index``: None = the first vector port if there is one (Drake's
    default), ``"none"`` for no port, or an index or name. Other inputs must be fixed in ``context``.
    """
    system.validate_context(context)
    discrete, period = _discrete_info(system, context)
    u_port, y_port = input_output_ports(system, input_port_index, output_port_index)
    x0, u0, f, g = _functions(system, context, u_port, y_port, discrete)
    A, B = jax.jacfwd(f, argnums=(0, 1))(x0, u0)
    C, D = jax.jacfwd(g, argnums=(0, 1))(x0, u0)
    fx, gx = f(x0, u0), g(x0, u0)
    f0 = fx - A @ x0 - B @ u0
    y0 = gx - C @ x0 - D @ u0
    return AffineSystem(
        np.asarray(A),
        np.asarray(B),
        np.asarray(f0),
        np.asarray(C),
        np.asarray(D),
        np.asarray(y0),
        time_period=period or 0.0,
    )


def linearize(
    system: System,
    context: Context,
    input_port_index: Any = None,
    output_port_index: Any = None,
    equilibrium_check_tolerance: float | None = 1e-6,
) -> LinearSystem:
    """The linearization about an equilibrium (Drake: ``Linearize``) as a [`LinearSystem`][jaxsys.LinearSystem] in
    deviation coordinates: δẋ = A δx + B δu, δy = C δx + D δu.

    Raises [`NotEquilibriumError`][jaxsys.NotEquilibriumError] (Drake's message) if f(x0, u0) (continuous) or x⁺ − x0
    (discrete) exceeds ``equilibrium_check_tolerance`` in any component; pass None to skip the check.
    Discrete-time systems (one discrete group, one update period) give the discrete matrices.
    """
    system.validate_context(context)
    discrete, period = _discrete_info(system, context)
    u_port, y_port = input_output_ports(system, input_port_index, output_port_index)
    x0, u0, f, g = _functions(system, context, u_port, y_port, discrete)
    if equilibrium_check_tolerance is not None:
        residual = f(x0, u0) - (x0 if discrete else 0.0)
        if not bool(jnp.all(jnp.abs(residual) <= equilibrium_check_tolerance)):
            raise NotEquilibriumError(
                "The nominal operating point (x0,u0) is not an equilibrium point of the system.  Without "
                "additional information, a time-invariant linearization of this system is not well defined. "
                f"(System {system.get_system_id_string()}: residual {np.asarray(residual)} exceeds "
                f"equilibrium_check_tolerance={equilibrium_check_tolerance}; use "
                f"first_order_taylor_approximation for an affine model, or pass equilibrium_check_tolerance=None.)"
            )
    A, B = jax.jacfwd(f, argnums=(0, 1))(x0, u0)
    C, D = jax.jacfwd(g, argnums=(0, 1))(x0, u0)
    return LinearSystem(np.asarray(A), np.asarray(B), np.asarray(C), np.asarray(D), time_period=period or 0.0)


def controllability_matrix(A: Any, B: Any) -> np.ndarray:
    """[B, AB, A²B, …, Aⁿ⁻¹B], shape (n, n·m) (Drake's ``ControllabilityMatrix``)."""
    A, B = np.asarray(A, float), np.asarray(B, float)
    blocks, M = [], B
    for _ in range(A.shape[0]):
        blocks.append(M)
        M = A @ M
    return np.hstack(blocks) if blocks else np.zeros((0, B.shape[1] if B.ndim == 2 else 0))


def observability_matrix(A: Any, C: Any) -> np.ndarray:
    """[C; CA; …; CAⁿ⁻¹], shape (n·p, n) (Drake's ``ObservabilityMatrix``)."""
    return controllability_matrix(np.asarray(A, float).T, np.asarray(C, float).T).T


def _rank_tol(M: np.ndarray, threshold: float | None) -> float:
    return threshold if threshold is not None else max(M.shape) * np.finfo(float).eps * max(1.0, np.abs(M).max())


def is_controllable(A: Any, B: Any, threshold: float | None = None) -> bool:
    """Whether (A, B) is controllable: the controllability matrix has full rank n (Drake's
    ``IsControllable``; ``threshold`` the singular-value cutoff, default n·eps·|M|)."""
    M = controllability_matrix(A, B)
    return bool(np.linalg.matrix_rank(M, tol=_rank_tol(M, threshold)) == np.asarray(A).shape[0])


def is_observable(A: Any, C: Any, threshold: float | None = None) -> bool:
    """Whether (A, C) is observable (Drake's ``IsObservable``)."""
    M = observability_matrix(A, C)
    return bool(np.linalg.matrix_rank(M, tol=_rank_tol(M, threshold)) == np.asarray(A).shape[0])


def is_stabilizable(A: Any, B: Any, continuous_time: bool = True, threshold: float | None = None) -> bool:
    """Whether every unstable mode of A (Re λ ≥ 0, or |λ| ≥ 1 in discrete time) can be moved by the input
    (the PBH test; Drake's ``IsStabilizable``)."""
    A, B = np.asarray(A, float), np.asarray(B, float)
    n = A.shape[0]
    tol = threshold if threshold is not None else 1e-9 * max(1.0, float(np.abs(A).max()) if n else 1.0)
    for lam in np.linalg.eigvals(A):
        stable = (lam.real < -tol) if continuous_time else (abs(lam) < 1.0 - tol)
        if not stable and np.linalg.matrix_rank(np.hstack([lam * np.eye(n) - A, B]), tol=tol) < n:
            return False
    return True


def is_detectable(A: Any, C: Any, continuous_time: bool = True, threshold: float | None = None) -> bool:
    """Whether every unstable mode of A is seen by the output (Drake's ``IsDetectable``)."""
    return is_stabilizable(np.asarray(A, float).T, np.asarray(C, float).T, continuous_time, threshold)


__all__ = [
    "NotEquilibriumError",
    "controllability_matrix",
    "first_order_taylor_approximation",
    "input_output_ports",
    "is_controllable",
    "is_detectable",
    "is_observable",
    "is_stabilizable",
    "linearize",
    "observability_matrix",
]
