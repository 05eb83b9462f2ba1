"""State estimators (Drake's systems/estimators): the Luenberger observer, steady-state Kalman filter
gains (continuous and discrete time, and the observer system built from them), and an extended Kalman
filter for nonlinear plants (beyond Drake) whose Jacobians come from ``jax.jacfwd``.

Each estimator holds a copy of the observed system and its context (the system is not added to any
diagram), and keeps its gains / noise covariances as numeric parameters, so they live in the context:
differentiable and batchable.

Imports (within jaxsys): the framework's ``context``, ``errors``, ``leaf_system``, ``system``;
``controllers`` (Riccati equations), ``primitives/linearize``.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..controllers.lqr import continuous_algebraic_riccati, discrete_algebraic_riccati_equation
from ..framework.context import Context
from ..framework.errors import JaxsysError
from ..framework.leaf_system import LeafSystem
from ..framework.ports import vector_input_ports, vector_output_ports
from ..framework.system import System
from ..primitives.linearize import linearize


def _observed_ports(system: System, caller: str, output_port: Any = None) -> tuple[Any, Any]:
    """(output port, input port or None) of the observed system: its one vector output port (or the
    one named by ``output_port``, an index or name), at most one vector input port."""
    outputs = vector_output_ports(system)
    inputs = vector_input_ports(system)
    name = system.get_system_id_string()
    if output_port is not None:
        port = system.get_output_port(output_port)
        if port.is_abstract():
            raise JaxsysError(f"{caller}: the measured output port {port.get_name()!r} of System {name} is abstract.")
        outputs = [port]
    if len(outputs) != 1:
        raise JaxsysError(
            f"{caller}: the observed System {name} must have exactly one vector output port; it has {len(outputs)}."
        )
    if len(inputs) > 1:
        raise JaxsysError(
            f"{caller}: the observed System {name} must have at most one vector input port; it has {len(inputs)}."
        )
    return system.get_output_port(outputs[0].get_index()), (
        system.get_input_port(inputs[0].get_index()) if inputs else None
    )


def _check_continuous(context: Context, system: System, caller: str) -> int:
    system.validate_context(context)
    if context.num_discrete_state_groups() or context.num_abstract_states():
        raise JaxsysError(
            f"{caller}: the observed System {system.get_system_id_string()} must have continuous state only "
            f"(it has {context.num_discrete_state_groups()} discrete groups and "
            f"{context.num_abstract_states()} abstract states)."
        )
    n = context.num_continuous_states()
    if n == 0:
        raise JaxsysError(
            f"{caller}: the observed System {system.get_system_id_string()} has no continuous state to estimate."
        )
    return n


def _square(M: Any, size: int, name: str, caller: str) -> np.ndarray:
    M = np.atleast_2d(np.asarray(M, float))
    if M.shape != (size, size):
        raise JaxsysError(f"{caller}: {name} must have shape {(size, size)}; got {M.shape}.")
    if not np.all(np.isfinite(M)) or not np.allclose(M, M.T, atol=1e-12 * max(1.0, np.abs(M).max())):
        raise JaxsysError(f"{caller}: {name} must be a finite symmetric matrix; got {M.tolist()}.")
    if np.min(np.linalg.eigvalsh(M)) < -1e-12 * max(1.0, np.abs(M).max()):
        raise JaxsysError(f"{caller}: {name} must be positive semidefinite (a covariance); got {M.tolist()}.")
    return M


class _Observed(eqx.Module):
    """The observed system as functions: f(x, u) (time derivatives) and g(x, u) (its output), at the
    time and parameters of the given context."""

    system: System
    context: Context
    out_index: int = eqx.field(static=True)
    in_index: int | None = eqx.field(static=True)

    def _ctx(self, x: jax.Array, u: jax.Array) -> Context:
        ctx = self.context.with_continuous_state(x)
        if self.in_index is not None:
            ctx = self.system.get_input_port(self.in_index).fix_value(ctx, u)
        return ctx

    def f(self, x: jax.Array, u: jax.Array) -> jax.Array:
        return self.system._calc_time_derivatives_raw(self._ctx(x, u))

    def g(self, x: jax.Array, u: jax.Array) -> jax.Array:
        return self.system.get_output_port(self.out_index).eval(self._ctx(x, u))


class LuenbergerObserver(LeafSystem):
    """A Luenberger observer (Drake's ``LuenbergerObserver``) for a continuous-time observed system
    ẋ = f(x, u), y = g(x, u):  dx̂/dt = f(x̂, u) + L (y − g(x̂, u)).

    - Input ports ``observed_system_output`` (size p) and, when the observed system has an input,
      ``observed_system_input`` (size m); output ``estimated_state`` (size n, x̂: no feedthrough).
    - Continuous state x̂ (n), initially the observed context's state (set it in the context).
    - Numeric parameter 0: the gain L (n × p), flattened row-major.
    - ``observed_system``: one vector output port, at most one vector input port, continuous state
      only; it is held, not added to a diagram (it may also be the plant of your diagram).
    """

    observed: _Observed
    n: int = eqx.field(static=True)
    p: int = eqx.field(static=True)

    def __init__(
        self, observed_system: System, observed_system_context: Context, observer_gain: Any, name: str = ""
    ) -> None:
        super().__init__(name or "luenberger_observer")
        caller = "LuenbergerObserver"
        out, inp = _observed_ports(observed_system, caller)
        self.n = _check_continuous(observed_system_context, observed_system, caller)
        self.p = out.size()
        ctx = observed_system_context
        if inp is not None:
            ctx = inp.fix_value(ctx, np.zeros(inp.size()))  # the value is replaced at every evaluation
        self.observed = _Observed(observed_system, ctx, out.get_index(), None if inp is None else inp.get_index())
        L = np.atleast_2d(np.asarray(observer_gain, float))
        if L.shape != (self.n, self.p):
            raise JaxsysError(
                f"{caller}: observer_gain must have shape (num states, num outputs) = {(self.n, self.p)}; "
                f"got {L.shape}."
            )
        cs = observed_system_context.get_continuous_state()
        self.declare_continuous_state(cs.num_q, cs.num_v, cs.num_z)
        self.declare_numeric_parameter(L.ravel())
        self.declare_vector_input_port("observed_system_output", self.p)
        if inp is not None:
            self.declare_vector_input_port("observed_system_input", inp.size())
        self.declare_vector_output_port(
            "estimated_state", self.n, lambda c: c.get_continuous_state_vector(), direct_feedthrough=False
        )

    def _u(self, context: Context) -> jax.Array:
        if self.observed.in_index is None:
            return jnp.zeros((0,), context.get_time().dtype)
        return self.get_input_port(1).eval(context)

    def do_calc_time_derivatives(self, context: Context) -> jax.Array:
        xh = context.get_continuous_state_vector()
        u = self._u(context)
        L = context.get_numeric_parameter(0).reshape(self.n, self.p)
        y = self.get_input_port(0).eval(context)
        obs = eqx.tree_at(lambda o: o.context, self.observed, self.observed.context.with_time(context.get_time()))
        return obs.f(xh, u) + L @ (y - obs.g(xh, u))

    def observer_gain(self, context: Context | None = None) -> jax.Array:
        """L (n × p): from ``context`` if given, else the default (Drake's ``observer_gain()``)."""
        ctx = context if context is not None else self.create_default_context()
        return ctx.get_numeric_parameter(0).reshape(self.n, self.p)

    def get_observed_system_output_input_port(self) -> Any:
        """The ``observed_system_output`` input port (y)."""
        return self.get_input_port(0)

    def get_observed_system_input_input_port(self) -> Any:
        """The ``observed_system_input`` input port (u); an error when the observed system has no input."""
        if self.observed.in_index is None:
            raise JaxsysError(
                f"LuenbergerObserver {self.get_system_id_string()}: the observed system has no input port."
            )
        return self.get_input_port(1)

    def get_estimated_state_output_port(self) -> Any:
        """The ``estimated_state`` output port (x̂)."""
        return self.get_output_port(0)


def steady_state_kalman_filter(*args: Any) -> Any:
    """Drake's ``SteadyStateKalmanFilter``, both forms:

    - ``steady_state_kalman_filter(A, C, W, V) -> L``: the steady-state gain of the continuous-time
      filter for ẋ = A x + B u + w, y = C x + D u + v with E[w wᵀ] = W δ, E[v vᵀ] = V δ:
      L = P Cᵀ V⁻¹, P solving A P + P Aᵀ − P Cᵀ V⁻¹ C P + W = 0. Shapes: A (n, n), C (p, n), W (n, n),
      V (p, p) positive definite. Differentiable.
    - ``steady_state_kalman_filter(system, context, W, V) -> LuenbergerObserver``: the observer for
      ``system`` linearized about ``context`` (an equilibrium), with that gain.
    """
    if isinstance(args[0], System):
        system, context, W, V = args
        lin = linearize(
            system, context, output_port_index=_observed_ports(system, "steady_state_kalman_filter")[0].get_index()
        )
        lctx = lin.create_default_context()
        L = steady_state_kalman_filter(lin.A(lctx), lin.C(lctx), W, V)
        return LuenbergerObserver(system, context, np.asarray(L))
    A, C, W, V = args
    P = continuous_algebraic_riccati(jnp.asarray(A).T, jnp.asarray(C).T, W, V)
    return jnp.linalg.solve(jnp.asarray(V, P.dtype), jnp.asarray(C, P.dtype) @ P).T


def discrete_time_steady_state_kalman_filter(A: Any, C: Any, W: Any, V: Any) -> jax.Array:
    """The steady-state gain L of the discrete-time Kalman filter for x[n+1] = A x[n] + B u[n] + w[n],
    y[n] = C x[n] + D u[n] + v[n] (E[w wᵀ] = W, E[v vᵀ] = V), in Drake's predictor form
    x̂[n+1] = A x̂[n] + B u[n] + L (y[n] − C x̂[n] − D u[n]):  L = A P Cᵀ (C P Cᵀ + V)⁻¹, P solving the
    discrete Riccati equation of the dual problem (Drake: ``DiscreteTimeSteadyStateKalmanFilter``).
    Differentiable."""
    P = discrete_algebraic_riccati_equation(jnp.asarray(A).T, jnp.asarray(C).T, W, V)
    A, C, V = (jnp.asarray(M, P.dtype) for M in (A, C, V))
    return A @ P @ C.T @ jnp.linalg.inv(C @ P @ C.T + V)


def _value_and_jacobian(f: Any, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(df/dx, f(x)) from one forward-mode pass (the value rides along as aux)."""

    def twice(z: jax.Array) -> tuple[jax.Array, jax.Array]:
        value = f(z)
        return value, value

    return jax.jacfwd(twice, has_aux=True)(x)


class ExtendedKalmanFilter(LeafSystem):
    """A continuous-discrete extended Kalman filter (beyond Drake) for a nonlinear observed system
    ẋ = f(x, u), y = g(x, u), sampled every ``period`` seconds (from t = 0).

    At each sample t_k: predict from t_{k−1} with ``substeps`` RK4 steps of f under the input held
    since t_{k−1} (x̂⁻ = F(x̂, u_{k−1}), P⁻ = F_x P F_xᵀ + W; skipped at the first sample), then
    correct with the measurement y_k: K = P⁻ Hᵀ (H P⁻ Hᵀ + V)⁻¹, x̂ = x̂⁻ + K (y_k − g(x̂⁻, u_k)),
    P = (I − K H) P⁻ (I − K H)ᵀ + K V Kᵀ (Joseph form). F_x and H are ``jax.jacfwd`` Jacobians. For a
    linear plant this is exactly the discrete Kalman filter of the RK4 map.

    - W: covariance of the process noise added over one period (n × n); V: measurement noise
      covariance (p × p, positive definite). Numeric parameters 0 and 1 (flattened).
    - Input ports ``observed_system_output`` (p) and, when the observed system has an input,
      ``observed_system_input`` (m); outputs ``estimated_state`` (n) and ``estimated_covariance``
      (n·n, row-major), both held between samples (no feedthrough).
    - Discrete state [x̂, P, u_{k−1}, samples taken]; initially ``initial_state`` (default: the
      observed context's state) and ``initial_covariance`` (default: W).
    - The observed system must be time-invariant (f and g are evaluated at the context's time). Its
      measured output is its one vector output port, or ``output_port`` (an index or a name).
    """

    observed: _Observed
    n: int = eqx.field(static=True)
    p: int = eqx.field(static=True)
    m: int = eqx.field(static=True)
    period: float = eqx.field(static=True)
    substeps: int = eqx.field(static=True)

    def __init__(
        self,
        observed_system: System,
        observed_system_context: Context,
        W: Any,
        V: Any,
        period: float,
        initial_state: Any = None,
        initial_covariance: Any = None,
        substeps: int = 1,
        output_port: Any = None,
        name: str = "",
    ) -> None:
        super().__init__(name or "extended_kalman_filter")
        caller = "ExtendedKalmanFilter"
        out, inp = _observed_ports(observed_system, caller, output_port)
        n = self.n = _check_continuous(observed_system_context, observed_system, caller)
        p = self.p = out.size()
        m = self.m = 0 if inp is None else inp.size()
        if not period > 0:
            raise JaxsysError(f"{caller}: period must be positive; got {period}.")
        self.period, self.substeps = float(period), int(substeps)
        W = _square(W, n, "W (process noise covariance, n x n)", caller)
        V = _square(V, p, "V (measurement noise covariance, p x p)", caller)
        if np.min(np.linalg.eigvalsh(V)) <= 0:
            raise JaxsysError(f"{caller}: V must be positive definite; got {V.tolist()}.")
        x0 = (
            np.asarray(observed_system_context.get_continuous_state_vector(), float)
            if initial_state is None
            else np.asarray(initial_state, float)
        )
        if x0.shape != (n,):
            raise JaxsysError(f"{caller}: initial_state must have shape ({n},); got {x0.shape}.")
        P0 = W if initial_covariance is None else _square(initial_covariance, n, "initial_covariance", caller)
        ctx = observed_system_context
        if inp is not None:
            ctx = inp.fix_value(ctx, np.zeros(m))
        self.observed = _Observed(observed_system, ctx, out.get_index(), None if inp is None else inp.get_index())
        self.declare_numeric_parameter(W.ravel())
        self.declare_numeric_parameter(V.ravel())
        self.declare_discrete_state(np.concatenate([x0, P0.ravel(), np.zeros(m), [0.0]]))
        self.declare_vector_input_port("observed_system_output", p)
        if inp is not None:
            self.declare_vector_input_port("observed_system_input", m)
        self.declare_vector_output_port(
            "estimated_state", n, lambda c: c.get_discrete_state(0)[:n], direct_feedthrough=False
        )
        self.declare_vector_output_port(
            "estimated_covariance", n * n, lambda c: c.get_discrete_state(0)[n : n + n * n], direct_feedthrough=False
        )
        self.declare_periodic_discrete_update_event(self.period, 0.0, self._sample)

    def discrete_map(self, x: jax.Array, u: jax.Array) -> jax.Array:
        """F(x, u): ``substeps`` RK4 steps of f over one period under the constant input u."""
        f = self.observed.f
        h = self.period / self.substeps

        def step(_: int, x: jax.Array) -> jax.Array:
            k1 = f(x, u)
            k2 = f(x + 0.5 * h * k1, u)
            k3 = f(x + 0.5 * h * k2, u)
            k4 = f(x + h * k3, u)
            return x + h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)

        return jax.lax.fori_loop(0, self.substeps, step, x)

    def _sample(self, context: Context, ds: Any) -> jax.Array:
        n, p, m = self.n, self.p, self.m
        s = context.get_discrete_state(0)
        x, P = s[:n], s[n : n + n * n].reshape(n, n)
        u_last, started = s[n + n * n : n + n * n + m], s[-1]
        W = context.get_numeric_parameter(0).reshape(n, n)
        V = context.get_numeric_parameter(1).reshape(p, p)
        u = self.get_input_port(1).eval(context) if m else jnp.zeros((0,), s.dtype)
        y = self.get_input_port(0).eval(context)
        # predict over the last period (not before the first sample)
        Fx, x_mapped = _value_and_jacobian(lambda z: self.discrete_map(z, u_last), x)
        x_pred = jnp.where(started > 0, x_mapped, x)
        P_pred = jnp.where(started > 0, Fx @ P @ Fx.T + W, P)
        # correct with the measurement
        H, y_pred = _value_and_jacobian(lambda z: self.observed.g(z, u), x_pred)
        S = H @ P_pred @ H.T + V
        K = jnp.linalg.solve(S, H @ P_pred).T
        x_new = x_pred + K @ (y - y_pred)
        IKH = jnp.eye(n, dtype=s.dtype) - K @ H
        P_new = IKH @ P_pred @ IKH.T + K @ V @ K.T
        P_new = 0.5 * (P_new + P_new.T)
        return jnp.concatenate([x_new, P_new.ravel(), u, jnp.ones((1,), s.dtype)])

    def get_estimated_state_output_port(self) -> Any:
        """The ``estimated_state`` output port (x̂)."""
        return self.get_output_port(0)


__all__ = [
    "ExtendedKalmanFilter",
    "LuenbergerObserver",
    "discrete_time_steady_state_kalman_filter",
    "steady_state_kalman_filter",
]
