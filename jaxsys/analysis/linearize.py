"""Linearization and LQR (Drake's ``Linearize``, ``FirstOrderTaylorApproximation``,
``LinearQuadraticRegulator``), computed with ``jax.jacfwd`` and differentiable end to end.

Imports (within jaxsys): the framework's ``context``, ``dispatch``, ``errors``, ``events``,
``system``; ``primitives/linear``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context
from ..framework.errors import JaxsysError
from ..framework.ports import vector_input_ports, vector_output_ports
from ..framework.system import System
from ..primitives.linear import AffineSystem, LinearSystem


class NotEquilibriumError(JaxsysError, ValueError):
    """Linearize was asked for a time-invariant linearization at a point that is not an equilibrium."""


def _ports(system: System, input_port_index: Any, output_port_index: Any) -> tuple[Any, Any]:
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
    from ..framework.dispatch import all_events
    from ..framework.events import DISCRETE_UPDATE, TriggerType

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
    from ..framework.context import DiscreteValues
    from ..framework.dispatch import dispatch_discrete
    from ..framework.events import DISCRETE_UPDATE, EventCollection, TriggerType

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
    u_port, y_port = _ports(system, input_port_index, output_port_index)
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
    u_port, y_port = _ports(system, input_port_index, output_port_index)
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


def _matrix_sign(H: jax.Array, iterations: int) -> jax.Array:
    """sign(H) by the scaled Newton iteration Z <- (c Z + (c Z)^-1) / 2 (determinant scaling)."""
    n = H.shape[0]

    def body(_: int, Z: jax.Array) -> jax.Array:
        Zi = jnp.linalg.inv(Z)
        _, logdet = jnp.linalg.slogdet(Z)
        c = jnp.exp(-logdet / n)
        return 0.5 * (c * Z + Zi / c)

    return jax.lax.fori_loop(0, iterations, body, H)


def _matrix(M: Any, name: str, caller: str) -> Any:
    if M is None:
        raise JaxsysError(f"{caller}: {name} is required.")
    try:
        arr = M if isinstance(M, jax.core.Tracer) else np.asarray(M)
    except Exception as e:  # noqa: BLE001
        raise JaxsysError(f"{caller}: {name} must be a numeric matrix; got {type(M).__name__}.") from e
    if not isinstance(arr, jax.core.Tracer) and arr.dtype.kind not in "biuf":
        raise JaxsysError(f"{caller}: {name} must be a real numeric matrix; got dtype {arr.dtype}.")
    if np.ndim(arr) != 2:
        raise JaxsysError(f"{caller}: {name} must be a 2-D matrix; got shape {tuple(np.shape(arr))}.")
    return arr


def check_lqr_inputs(
    A: Any, B: Any, Q: Any, R: Any, N: Any, caller: str, discrete: bool = False, skip_stabilizability: bool = False
) -> None:
    """Drake's checks of an LQR problem, with named errors: shapes (A n x n, B n x m, Q n x n, R m x m,
    N n x m), and where the values are known (not traced): R symmetric positive definite, Q symmetric,
    Q - N R^-1 N^T positive semidefinite, (A, B) stabilizable and (A, Q) detectable (PBH tests on the
    eigenvalues with nonnegative real part), so that a stabilizing solution exists."""
    A, B, Q, R = (_matrix(M, name, caller) for M, name in ((A, "A"), (B, "B"), (Q, "Q"), (R, "R")))
    n = np.shape(A)[0]
    m = np.shape(B)[1]
    expected = {"A": (n, n), "B": (n, m), "Q": (n, n), "R": (m, m)}
    for name, M in (("A", A), ("B", B), ("Q", Q), ("R", R)):
        if tuple(np.shape(M)) != expected[name]:
            raise JaxsysError(
                f"{caller}: {name} must have shape {expected[name]} (A is {tuple(np.shape(A))}, B is "
                f"{tuple(np.shape(B))}: n = {n} states, m = {m} inputs); got {tuple(np.shape(M))}."
            )
    if N is not None:
        N = _matrix(N, "N", caller)
        if tuple(np.shape(N)) != (n, m):
            raise JaxsysError(f"{caller}: N must have shape {(n, m)}; got {tuple(np.shape(N))}.")
    if any(isinstance(M, jax.core.Tracer) for M in (A, B, Q, R, N)):
        return
    A, B, Q, R = (np.asarray(M, dtype=float) for M in (A, B, Q, R))
    for name, M in (("A", A), ("B", B), ("Q", Q), ("R", R)):
        if not np.all(np.isfinite(M)):
            raise JaxsysError(f"{caller}: {name} has non-finite entries.")
    scale = max(1.0, float(np.max(np.abs(R))))
    if not np.allclose(R, R.T, atol=1e-10 * scale):
        raise JaxsysError(f"{caller}: R must be symmetric; got R = {R.tolist()}.")
    if m and np.min(np.linalg.eigvalsh(R)) <= 1e-14 * scale:
        raise JaxsysError(
            f"{caller}: R must be positive definite (every input must cost something); its smallest eigenvalue is "
            f"{np.min(np.linalg.eigvalsh(R)):.3g}. (Drake: 'R must be positive definite'.)"
        )
    qscale = max(1.0, float(np.max(np.abs(Q))))
    if not np.allclose(Q, Q.T, atol=1e-10 * qscale):
        raise JaxsysError(f"{caller}: Q must be symmetric; got Q = {Q.tolist()}.")
    Qn = Q if N is None else Q - np.asarray(N, float) @ np.linalg.solve(R, np.asarray(N, float).T)
    if n and np.min(np.linalg.eigvalsh(0.5 * (Qn + Qn.T))) < -1e-10 * qscale:
        raise JaxsysError(
            f"{caller}: Q{' - N R^-1 N^T' if N is not None else ''} must be positive semidefinite; its smallest "
            f"eigenvalue is {np.min(np.linalg.eigvalsh(0.5 * (Qn + Qn.T))):.3g}."
        )
    if skip_stabilizability:  # (a finite horizon needs neither)
        return
    ascale = max(1.0, float(np.max(np.abs(A)))) if n else 1.0
    tol = 1e-9 * ascale
    for lam in np.linalg.eigvals(A):
        if (abs(lam) < 1.0 - tol) if discrete else (lam.real < -tol):  # a stable mode needs nothing
            continue
        pencil = lam * np.eye(n) - A
        if np.linalg.matrix_rank(np.hstack([pencil, B]), tol=tol) < n:
            raise JaxsysError(
                f"{caller}: (A, B) is not stabilizable: the mode at eigenvalue {lam:.4g} of A cannot be moved by any "
                f"input (PBH test), so no feedback makes the closed loop stable. (Drake: 'IsStabilizable(A, B)'.)"
            )
        if np.linalg.matrix_rank(np.vstack([pencil, Qn]), tol=tol) < n:
            raise JaxsysError(
                f"{caller}: (A, Q) is not detectable: the mode at eigenvalue {lam:.4g} of A is not seen by the cost Q "
                f"(PBH test), so the optimal control leaves it alone and there is no stabilizing solution. Add "
                f"weight on that mode to Q."
            )


def continuous_algebraic_riccati(A: Any, B: Any, Q: Any, R: Any, N: Any = None, iterations: int = 60) -> jax.Array:
    """S solving Aᵀ S + S A − (S B + N) R⁻¹ (Bᵀ S + Nᵀ) + Q = 0 (the stabilizing solution).

    Matrix-sign-function method on the Hamiltonian: only inverses and products, so ``jax.grad``
    goes through it. (Drake: ``ContinuousAlgebraicRiccatiEquation``.) The inputs are checked as Drake
    checks them (`check_lqr_inputs`): shapes always, and when their values are known, R positive
    definite, Q symmetric positive semidefinite, (A, B) stabilizable and (A, Q) detectable.
    """
    check_lqr_inputs(A, B, Q, R, N, "continuous_algebraic_riccati")
    return _care(A, B, Q, R, N, iterations)


def _without_cross_term(A: Any, B: Any, Q: Any, R: Any, N: Any) -> tuple[jax.Array, ...]:
    """(A, B, Q, R⁻¹) as arrays, with the cross term N folded in (A − B R⁻¹ Nᵀ, Q − N R⁻¹ Nᵀ): the same
    Riccati solution without N."""
    A, B, Q, R = (jnp.asarray(M, dtype=jnp.result_type(float)) for M in (A, B, Q, R))
    Rinv = jnp.linalg.inv(R)
    if N is not None:
        N = jnp.asarray(N, A.dtype)
        A = A - B @ Rinv @ N.T
        Q = Q - N @ Rinv @ N.T
    return A, B, Q, Rinv


def _care(A: Any, B: Any, Q: Any, R: Any, N: Any = None, iterations: int = 60) -> jax.Array:
    A, B, Q, Rinv = _without_cross_term(A, B, Q, R, N)
    n = A.shape[0]
    G = B @ Rinv @ B.T
    H = jnp.block([[A, -G], [-Q, -A.T]])
    Z = _matrix_sign(H, iterations)
    Z11, Z12, Z21, Z22 = Z[:n, :n], Z[:n, n:], Z[n:, :n], Z[n:, n:]
    lhs = jnp.concatenate([Z12, Z22 + jnp.eye(n, dtype=A.dtype)], axis=0)
    rhs = -jnp.concatenate([Z11 + jnp.eye(n, dtype=A.dtype), Z21], axis=0)
    S = jnp.linalg.lstsq(lhs, rhs)[0]
    return 0.5 * (S + S.T)


def linear_quadratic_regulator(A: Any, B: Any, Q: Any, R: Any, N: Any = None) -> tuple[jax.Array, jax.Array]:
    """(K, S) for u = −K x minimizing ∫ xᵀQx + uᵀRu + 2xᵀNu dt (Drake: ``LinearQuadraticRegulator(A, B, Q, R, N)``).

    S solves the continuous algebraic Riccati equation; K = R⁻¹ (Bᵀ S + Nᵀ). Differentiable. Bad
    problems are named errors, as in Drake: wrong shapes, R not positive definite, Q not symmetric
    positive semidefinite, (A, B) not stabilizable, (A, Q) not detectable (values checked when known,
    i.e. not under a trace).
    """
    check_lqr_inputs(A, B, Q, R, N, "linear_quadratic_regulator")
    S = _care(A, B, Q, R, N)
    B = jnp.asarray(B, S.dtype)
    NT = 0.0 if N is None else jnp.asarray(N, S.dtype).T
    K = jnp.linalg.solve(jnp.asarray(R, S.dtype), B.T @ S + NT)
    return K, S


def discrete_algebraic_riccati_equation(
    A: Any, B: Any, Q: Any, R: Any, N: Any = None, iterations: int = 40
) -> jax.Array:
    """S solving S = Aᵀ S A − (Aᵀ S B + N)(R + Bᵀ S B)⁻¹(Bᵀ S A + Nᵀ) + Q, the stabilizing solution
    (Drake: ``DiscreteAlgebraicRiccatiEquation``).

    Structure-preserving doubling (quadratically convergent; only inverses and products, so
    ``jax.grad`` and ``vmap`` go through it). Inputs are checked as for
    [`continuous_algebraic_riccati`][jaxsys.continuous_algebraic_riccati], with the discrete-time stabilizability /
    detectability tests
    (modes with |λ| >= 1).
    """
    check_lqr_inputs(A, B, Q, R, N, "discrete_algebraic_riccati_equation", discrete=True)
    return _dare(A, B, Q, R, N, iterations)


def _dare(A: Any, B: Any, Q: Any, R: Any, N: Any = None, iterations: int = 40) -> jax.Array:
    A, B, Q, Rinv = _without_cross_term(A, B, Q, R, N)
    n = A.shape[0]
    eye = jnp.eye(n, dtype=A.dtype)

    def body(_: int, carry: tuple) -> tuple:
        Ak, Gk, Hk = carry
        W = jnp.linalg.inv(eye + Gk @ Hk)
        return Ak @ W @ Ak, Gk + Ak @ W @ Gk @ Ak.T, Hk + Ak.T @ Hk @ W @ Ak

    _, _, S = jax.lax.fori_loop(0, iterations, body, (A, B @ Rinv @ B.T, Q))
    return 0.5 * (S + S.T)


def discrete_time_linear_quadratic_regulator(
    A: Any, B: Any, Q: Any, R: Any, N: Any = None
) -> tuple[jax.Array, jax.Array]:
    """(K, S) for u[n] = −K x[n] minimizing Σ x[n]ᵀQx[n] + u[n]ᵀRu[n] + 2x[n]ᵀNu[n] subject to
    x[n+1] = A x[n] + B u[n] (Drake: ``DiscreteTimeLinearQuadraticRegulator``).

    S solves the discrete algebraic Riccati equation; K = (R + BᵀSB)⁻¹(BᵀSA + Nᵀ). Differentiable.
    """
    check_lqr_inputs(A, B, Q, R, N, "discrete_time_linear_quadratic_regulator", discrete=True)
    S = _dare(A, B, Q, R, N)
    A, B, R = (jnp.asarray(M, S.dtype) for M in (A, B, R))
    NT = 0.0 if N is None else jnp.asarray(N, S.dtype).T
    K = jnp.linalg.solve(R + B.T @ S @ B, B.T @ S @ A + NT)
    return K, S


def linear_quadratic_regulator_system(
    system: System, context: Context, Q: Any, R: Any, N: Any = None, input_port_index: Any = None
) -> AffineSystem:
    """An LQR controller for ``system`` about the equilibrium in ``context`` (Drake's system form of
    ``LinearQuadraticRegulator``): a stateless AffineSystem with input x (the plant's full state) and
    output u = u0 − K (x − x0)."""
    lin = linearize(system, context, input_port_index, output_port_index="none")
    lctx = lin.create_default_context()
    K, _ = linear_quadratic_regulator(lin.A(lctx), lin.B(lctx), Q, R, N)
    u_port, _ = _ports(system, input_port_index, "none")
    x0 = context.get_continuous_state_vector()
    u0 = u_port.eval(context)
    K = np.asarray(K)
    return AffineSystem(
        np.zeros((0, 0)), np.zeros((0, K.shape[1])), (), np.zeros((K.shape[0], 0)), -K, np.asarray(u0 + K @ x0)
    )


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
