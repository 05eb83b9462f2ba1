"""Time-varying LQR about a nominal trajectory (Drake's ``FiniteHorizonLinearQuadraticRegulator`` and
``MakeFiniteHorizonLinearQuadraticRegulator``), with the Riccati differential equation integrated by the
library's own simulator (error-controlled), so gradients flow through it.

Imports (within jaxsys): the framework's ``context``, ``errors``, ``leaf_system``, ``system``;
``primitives/sources``; ``analysis/linearize`` (input checks).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context
from ..framework.errors import JaxsysError
from ..framework.leaf_system import LeafSystem
from ..framework.ports import vector_input_ports
from ..framework.system import System
from .sources import PiecewisePolynomial


def _analysis() -> Any:
    from ..analysis import integrators, simulate

    return integrators, simulate


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
    from ..analysis.linearize import check_lqr_inputs

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
    integrators, sim_module = _analysis()
    horizon = float(tf) - float(t0)
    num_steps = int(num_steps)
    taus = np.linspace(0.0, horizon, num_steps + 1)
    riccati = _Riccati(lambda S, tau: minus_sdot(S, tf - tau), n, Qf)
    integ = integrator or integrators.RungeKutta5Integrator(target_accuracy=1e-10 if dtype == jnp.float64 else 1e-5)
    run = sim_module.simulate(riccati, riccati.create_default_context(), horizon, integ, save_at=taus)
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
    "finite_horizon_linear_quadratic_regulator",
    "make_finite_horizon_linear_quadratic_regulator",
]
