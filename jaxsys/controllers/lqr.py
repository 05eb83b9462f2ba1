"""Linear-quadratic regulators (Drake's systems/controllers): ``LinearQuadraticRegulator`` (continuous
and discrete time, as gains or as a controller system), the algebraic Riccati equations they solve
(Drake's ``ContinuousAlgebraicRiccatiEquation``, ``DiscreteAlgebraicRiccatiEquation``), and the
time-varying LQR about a nominal trajectory (``FiniteHorizonLinearQuadraticRegulator``,
``MakeFiniteHorizonLinearQuadraticRegulator``), whose Riccati differential equation is integrated by
the library's own simulator (error-controlled), so gradients flow through it.

Imports (within jaxsys): the framework; ``trajectories``; ``primitives`` (``linear``, ``linearize``);
``analysis`` (``simulate``, ``integrators``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..analysis import integrators
from ..analysis.simulate import simulate
from ..framework.context import Context
from ..framework.errors import JaxsysError
from ..framework.leaf_system import LeafSystem
from ..framework.ports import vector_input_ports
from ..framework.system import System
from ..primitives.linear import AffineSystem
from ..primitives.linearize import input_output_ports, linearize
from ..trajectories import PiecewisePolynomial


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
    K_, _ = linear_quadratic_regulator(lin.A(lctx), lin.B(lctx), Q, R, N)
    u_port, _ = input_output_ports(system, input_port_index, "none")
    x0 = context.get_continuous_state_vector()
    u0 = u_port.eval(context)
    K = np.asarray(K_)
    return AffineSystem(
        np.zeros((0, 0)), np.zeros((0, K.shape[1])), (), np.zeros((K.shape[0], 0)), -K, np.asarray(u0 + K @ x0)
    )


_WHO = "finite_horizon_linear_quadratic_regulator"


@dataclasses.dataclass
class FiniteHorizonLQRResult:
    """Drake's ``FiniteHorizonLinearQuadraticRegulatorResult``: the cost-to-go x̄ᵀ S(t) x̄ (x̄ = x − x0(t))
    and the gain K(t) of u = u0(t) − K(t) (x − x0(t)), as trajectories.

    **Fields:** `times` (num_steps + 1,) the integration grid on [t0, tf]; `S` and `K`
    ([`PiecewisePolynomial`][jaxsys.PiecewisePolynomial], cubic Hermite in t, values flattened row-major: S is n·n, K
    is m·n); `x0`, `u0` the nominal trajectories. Use `S_at` / `K_at` for matrices.
    """

    times: np.ndarray
    S: PiecewisePolynomial
    K: PiecewisePolynomial
    x0: PiecewisePolynomial
    u0: PiecewisePolynomial
    n: int
    m: int

    def S_at(self, t: Any) -> jax.Array:
        """S(t), (n, n)."""
        return self.S.value(t).reshape(self.n, self.n)

    def K_at(self, t: Any) -> jax.Array:
        """K(t), (m, n)."""
        return self.K.value(t).reshape(self.m, self.n)


def _constant(value: jax.Array, t0: float, tf: float) -> PiecewisePolynomial:
    v = jnp.atleast_1d(jnp.asarray(value, float))
    return PiecewisePolynomial.zero_order_hold(np.array([t0, tf]), jnp.stack([v, v]))


def finite_horizon_linear_quadratic_regulator(
    system: System,
    context: Context,
    t0: float,
    tf: float,
    Q: Any,
    R: Any,
    Qf: Any = None,
    N: Any = None,
    x0: PiecewisePolynomial | None = None,
    u0: PiecewisePolynomial | None = None,
    num_steps: int = 400,
    input_port_index: Any = None,
    integrator: Any = None,
) -> FiniteHorizonLQRResult:
    """The finite-horizon LQR about a nominal trajectory (Drake's ``FiniteHorizonLinearQuadraticRegulator``).

    Minimizes x̄(tf)ᵀ Qf x̄(tf) + ∫ x̄ᵀQx̄ + ūᵀRū + 2x̄ᵀNū dt for the plant linearized along
    (x0(t), u0(t)) (A(t), B(t) by ``jax.jacfwd``); S solves
    −Ṡ = Q − (S B + N) R⁻¹ (Bᵀ S + Nᵀ) + S A + Aᵀ S, S(tf) = Qf, integrated backward with the simulator
    (``integrator``, default error-controlled RK5 at accuracy 1e-10; the equation is stiff where S is
    large) and sampled at ``num_steps`` + 1 times; K = R⁻¹ (Bᵀ S + Nᵀ). S and K are cubic Hermite
    interpolants through the samples (with Ṡ and K̇ from the equation).

    Args:
        system: the plant (continuous state; the input optimized is its one vector input port, or
            ``input_port_index``). It is not modified.
        context: the plant's context (parameters, other inputs; the nominal state and input when
            ``x0`` / ``u0`` are not given).
        t0, tf: the horizon (seconds).
        Q (n, n), R (m, m), Qf (n, n; default 0), N (n, m; default 0): the costs, checked as
            Drake checks them (shapes, R positive definite, Q and Qf symmetric).
        x0, u0: nominal trajectories (e.g. a trajectory optimization's ``input_trajectory`` and a
            PiecewisePolynomial of its states); default the context's state and input, constant.
    """
    ports = vector_input_ports(system)
    port = system.get_input_port(input_port_index) if input_port_index is not None else None
    if port is None:
        if len(ports) != 1:
            raise JaxsysError(
                f"finite_horizon_linear_quadratic_regulator: System {system.get_system_id_string()} has "
                f"{len(ports)} vector input ports; name the one to control with input_port_index."
            )
        port = system.get_input_port(ports[0].get_index())
    system.validate_context(context)
    n, m = context.num_continuous_states(), port.size()
    if not tf > t0:
        raise JaxsysError(f"finite_horizon_linear_quadratic_regulator: tf ({tf}) must be after t0 ({t0}).")
    dtype = jnp.result_type(float)
    Qf = np.zeros((n, n)) if Qf is None else Qf
    check_lqr_inputs(
        np.zeros((n, n)),
        np.zeros((n, m)),
        Q,
        R,
        N,
        "finite_horizon_linear_quadratic_regulator",
        skip_stabilizability=True,
    )
    if np.shape(Qf) != (n, n):
        raise JaxsysError(
            f"finite_horizon_linear_quadratic_regulator: Qf must have shape {(n, n)}; got {np.shape(Qf)}."
        )
    Q, R, Qf = (jnp.asarray(M, dtype) for M in (Q, R, Qf))
    Nm = jnp.zeros((n, m), dtype) if N is None else jnp.asarray(N, dtype)
    if x0 is None:
        x0 = _constant(context.get_continuous_state_vector(), t0, tf)
    if u0 is None:
        u0 = _constant(port.eval(context) if port.has_value(context) else jnp.zeros(m), t0, tf)
    if x0.rows() != n or u0.rows() != m:
        raise JaxsysError(f"{_WHO}: x0 must have {n} rows and u0 {m}; got {x0.rows()} and {u0.rows()}.")
    Rinv = jnp.linalg.inv(R)

    def f(x: jax.Array, u: jax.Array, t: jax.Array) -> jax.Array:
        ctx = port.fix_value(context.with_time(t).with_continuous_state(x), u)
        return system._calc_time_derivatives_raw(ctx)

    def AB(t: jax.Array) -> tuple[jax.Array, jax.Array]:
        return jax.jacfwd(f, argnums=(0, 1))(x0.value(t), u0.value(t), t)

    def minus_sdot(S: jax.Array, t: jax.Array) -> jax.Array:
        A, B = AB(t)
        SB = S @ B + Nm
        return Q - SB @ Rinv @ SB.T + S @ A + A.T @ S

    # S is integrated in reverse time tau = tf - t with the library's error-controlled simulator: the
    # Riccati equation is stiff where S is large (a large Qf against a small R), and error control
    # takes small steps there and large ones after
    horizon = float(tf) - float(t0)
    num_steps = int(num_steps)
    taus = np.linspace(0.0, horizon, num_steps + 1)
    riccati = _Riccati(lambda S, tau: minus_sdot(S, tf - tau), n, Qf)
    integ = integrator or integrators.RungeKutta5Integrator(target_accuracy=1e-10 if dtype == jnp.float64 else 1e-5)
    run = simulate(riccati, riccati.create_default_context(), horizon, integ, save_at=taus)
    Ss = run.ys.reshape(-1, n, n)[::-1]
    Ss = 0.5 * (Ss + jnp.swapaxes(Ss, 1, 2))
    times = np.linspace(float(t0), float(tf), num_steps + 1)
    tj = jnp.asarray(times, dtype)
    Sdots = -jax.vmap(minus_sdot)(Ss, tj)

    def gain(S: jax.Array, t: jax.Array) -> jax.Array:
        _, B = AB(t)
        return Rinv @ (B.T @ S + Nm.T)

    Ks = jax.vmap(gain)(Ss, tj)
    # dK/dt for the Hermite interpolant, by forward-mode along the nominal trajectory
    Kdots = jax.vmap(lambda S, Sd, t: jax.jvp(gain, (S, t), (Sd, jnp.ones_like(t)))[1])(Ss, Sdots, tj)
    return FiniteHorizonLQRResult(
        times,
        PiecewisePolynomial.cubic_hermite(times, Ss.reshape(len(times), -1), Sdots.reshape(len(times), -1)),
        PiecewisePolynomial.cubic_hermite(times, Ks.reshape(len(times), -1), Kdots.reshape(len(times), -1)),
        x0,
        u0,
        n,
        m,
    )


class _Riccati(LeafSystem):
    """The Riccati equation in reverse time as a system: state vec(S), dS/dtau = rhs(S, tau)."""

    rhs: Any = eqx.field(static=True)
    n: int = eqx.field(static=True)

    def __init__(self, rhs: Any, n: int, Qf: jax.Array) -> None:
        super().__init__("riccati")
        self.rhs, self.n = rhs, n
        self.declare_continuous_state(n * n, default=np.asarray(Qf, float).ravel())

    def do_calc_time_derivatives(self, context: Context) -> jax.Array:
        S = context.get_continuous_state_vector().reshape(self.n, self.n)
        return self.rhs(S, context.get_time()).ravel()


class _TimeVaryingLQR(LeafSystem):
    """u = u0(t) − K(t) (x − x0(t)): input ``plant_state`` (n), output ``control`` (m)."""

    K: PiecewisePolynomial
    x0: PiecewisePolynomial
    u0: PiecewisePolynomial
    n: int = eqx.field(static=True)
    m: int = eqx.field(static=True)

    def __init__(self, result: FiniteHorizonLQRResult, name: str = "") -> None:
        super().__init__(name or "finite_horizon_lqr")
        self.K, self.x0, self.u0, self.n, self.m = result.K, result.x0, result.u0, result.n, result.m
        self.declare_vector_input_port("plant_state", self.n)
        self.declare_vector_output_port("control", self.m, self.calc_control)

    def calc_control(self, context: Context) -> jax.Array:
        """u0(t) − K(t) (x − x0(t)); after the horizon the values at its end are held."""
        t = context.get_time()
        x = self.get_input_port(0).eval(context)
        K = self.K.value(t).reshape(self.m, self.n)
        return self.u0.value(t) - K @ (x - self.x0.value(t))


def make_finite_horizon_linear_quadratic_regulator(*args: Any, **kwargs: Any) -> LeafSystem:
    """The controller of
    [`finite_horizon_linear_quadratic_regulator`][jaxsys.finite_horizon_linear_quadratic_regulator] as a system (Drake's
    ``MakeFiniteHorizonLinearQuadraticRegulator``): input ``plant_state``, output ``control``,
    u = u0(t) − K(t) (x − x0(t)). Same arguments; or pass a
    [`FiniteHorizonLQRResult`][jaxsys.FiniteHorizonLQRResult]."""
    if len(args) == 1 and isinstance(args[0], FiniteHorizonLQRResult):
        return _TimeVaryingLQR(args[0], **kwargs)
    name = kwargs.pop("name", "")
    return _TimeVaryingLQR(finite_horizon_linear_quadratic_regulator(*args, **kwargs), name=name)


__all__ = [
    "FiniteHorizonLQRResult",
    "check_lqr_inputs",
    "continuous_algebraic_riccati",
    "discrete_algebraic_riccati_equation",
    "discrete_time_linear_quadratic_regulator",
    "finite_horizon_linear_quadratic_regulator",
    "linear_quadratic_regulator",
    "linear_quadratic_regulator_system",
    "make_finite_horizon_linear_quadratic_regulator",
]
