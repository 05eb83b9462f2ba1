"""Trajectory optimization on jaxsys systems: direct (single) shooting, multiple shooting and direct
collocation (Hermite-Simpson), with input and state bounds, a final-state constraint, and an optional
free final time.

* The input is a first-order-hold trajectory through knots u_0..u_N on a uniform grid. Shooting
  simulates the plant under it with the ordinary simulator (a small wrapper system holds the plant and
  interpolates the knots: the user's plant is never added to a diagram or changed), and the optimized
  input is a [`PiecewisePolynomial`][jaxsys.PiecewisePolynomial] that can be fed to the plant with a
  [`TrajectorySource`][jaxsys.TrajectorySource].
* Shooting simulates with ``simulate`` (fixed-step RK4, ``substeps`` steps per interval) in normalized
  time s = t / T (so the duration T can be a decision variable); multiple shooting simulates its
  segments in one ``vmap`` and adds continuity ("defect") constraints.
* Collocation evaluates the plant's time derivatives at the knots and interval midpoints (vmapped)
  and imposes the Hermite-Simpson defects.
* The nonlinear program is solved by `solve_nlp`: SciPy's SLSQP by default
  (``solver="slsqp"``), the pure-JAX augmented Lagrangian (``solver="augmented_lagrangian"``), or IPOPT
  with sparse constraint Jacobians (``solver="ipopt"``: hundreds of knots, robots; time per iteration
  linear in the number of knots where SLSQP's dense QP grows with its cube).

Costs: ``running_cost(x, u) -> scalar`` integrated over time, ``final_cost(x) -> scalar``, and
``time_cost`` per second of duration (with a free final time).

Imports (within jaxsys): the framework's ``context``, ``errors``, ``leaf_system``, ``system``;
``trajectories``; ``analysis`` (``integrators``, ``simulate``); ``optimization.nlp``.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..analysis.integrators import RungeKutta4Integrator
from ..analysis.simulate import simulate
from ..framework.context import Context
from ..framework.errors import JaxsysError
from ..framework.leaf_system import LeafSystem
from ..framework.ports import vector_input_ports
from ..framework.system import System
from ..trajectories import PiecewisePolynomial
from .nlp import augmented_lagrangian, solve_nlp


__all__ = ["TrajOptResult", "augmented_lagrangian", "direct_collocation", "direct_shooting", "simulate_open_loop"]


@dataclasses.dataclass
class TrajOptResult:
    """The outcome of a trajectory optimization (Drake's ``MathematicalProgramResult`` for a
    ``DirectCollocation`` / ``MultipleShooting`` program, reduced to what a trajectory needs).

    **Fields:** `method`; `times` (N+1,) knot times (seconds; with a free final time, on the optimized
    duration); `u` (N+1, m) input knots; `x` (N+1, n) states at the knots (from the method's own model);
    `cost`; `constraint_violation` (max abs over equality constraints and positive parts of
    inequalities and bounds); `iterations` (the solver's: SQP iterations, or augmented-Lagrangian
    outer iterations); `input_trajectory` (a first-order-hold PiecewisePolynomial of `u`); `success`
    (the solver converged and the violation is at most `tolerance`; when not, a warning names the
    options that control convergence); `tolerance`; `solver`; `message` (the solver's own words);
    `final_time` (= times[-1]).
    """

    method: str
    times: np.ndarray
    u: np.ndarray
    x: np.ndarray
    cost: float
    constraint_violation: float
    iterations: int
    input_trajectory: PiecewisePolynomial
    success: bool = False
    tolerance: float = 1e-6
    solver: str = "slsqp"
    message: str = ""

    @property
    def final_time(self) -> float:
        """The trajectory's duration T (seconds)."""
        return float(self.times[-1])


def _input_port(system: System) -> Any:
    ports = vector_input_ports(system)
    if len(ports) != 1:
        raise JaxsysError(
            f"Trajectory optimization needs a system with exactly one vector input port; System "
            f"{system.get_system_id_string()} has {len(ports)}."
        )
    return ports[0]


def _bounds(u_limit: Any, lower: Any, upper: Any, what: str) -> tuple[Any, Any]:
    """(lower, upper) from a symmetric limit and/or separate bounds (None: unbounded)."""
    if u_limit is not None:
        if lower is not None or upper is not None:
            raise JaxsysError(f"{what}: give u_limit (|u| <= u_limit) or u_lower/u_upper, not both.")
        lim = np.asarray(u_limit, float)
        if np.any(~(lim >= 0)):
            raise JaxsysError(
                f"{what}: u_limit must be >= 0 (|u| <= u_limit); got {u_limit}, which leaves no admissible input "
                f"(for one-sided or shifted bounds give u_lower / u_upper)."
            )
        return -lim, lim
    if lower is not None and upper is not None and np.any(np.asarray(lower, float) > np.asarray(upper, float)):
        raise JaxsysError(f"{what}: a lower bound is above its upper bound ({lower} > {upper}).")
    return lower, upper


def _box(bound: Any, shape: tuple[int, ...], fill: float) -> np.ndarray:
    """A per-knot bound (None, a scalar or a per-component vector) broadcast to (knots, size)."""
    if bound is None:
        return np.full(shape, fill)
    return np.broadcast_to(np.asarray(bound, float), shape).copy()


def _box_constraints(v: jax.Array, lower: Any, upper: Any) -> jax.Array:
    """``lower <= v`` and ``v <= upper`` as ``g(v) <= 0`` (elementwise; infinite bounds drop out)."""
    parts = []
    if lower is not None:
        lo = jnp.broadcast_to(jnp.asarray(lower, v.dtype), v.shape[-1:])
        parts.append(jnp.where(jnp.isfinite(lo), lo - v, -1.0).ravel())
    if upper is not None:
        hi = jnp.broadcast_to(jnp.asarray(upper, v.dtype), v.shape[-1:])
        parts.append(jnp.where(jnp.isfinite(hi), v - hi, -1.0).ravel())
    return jnp.concatenate(parts) if parts else jnp.zeros((0,), v.dtype)


def _final_time(T: float, final_time_bounds: Any, what: str) -> tuple[float, tuple[float, float] | None]:
    if final_time_bounds is None:
        if not T > 0:
            raise JaxsysError(f"{what}: the duration T must be positive, got {T}.")
        return float(T), None
    lo, hi = (float(b) for b in final_time_bounds)
    if not 0 < lo <= hi:
        raise JaxsysError(f"{what}: final_time_bounds must satisfy 0 < lower <= upper, got {final_time_bounds}.")
    return float(np.clip(T, lo, hi)), (lo, hi)


class _OpenLoop(LeafSystem):
    """The plant under a first-order-hold input, in normalized time s (plant time t = t_start + T s):
    its state is the plant's continuous state, its dynamics T times the plant's with the input
    interpolated between knots at ``knot_s``. Numeric parameter 0 holds the knots, parameter 1
    [T, t_start]. The plant is held as a field, never added to a diagram, so the same plant can be
    optimized, simulated and used in the user's own diagrams any number of times."""

    plant: System
    plant_context: Context
    port_index: int = eqx.field(static=True)
    knot_s: tuple[float, ...] = eqx.field(static=True)
    m: int = eqx.field(static=True)

    def __init__(self, plant: System, context: Context, port: Any, knot_s: np.ndarray) -> None:
        super().__init__("open_loop")
        self.plant = plant
        self.plant_context = context
        self.port_index = port.get_index()
        self.knot_s = tuple(float(s) for s in knot_s)
        self.m = port.size()
        cs = context.get_continuous_state()
        self.declare_continuous_state(cs.num_q, cs.num_v, cs.num_z)
        self.declare_numeric_parameter(np.zeros(len(knot_s) * self.m))
        self.declare_numeric_parameter(np.array([1.0, 0.0]))

    def do_calc_time_derivatives(self, context: Context) -> jax.Array:
        knots = context.get_numeric_parameter(0).reshape(len(self.knot_s), self.m)
        duration, t_start = context.get_numeric_parameter(1)
        s = context.get_time()
        u = jax.vmap(lambda col: jnp.interp(s, jnp.asarray(self.knot_s, s.dtype), col))(knots.T)
        port = self.plant.get_input_port(self.port_index)
        pctx = port.fix_value(
            self.plant_context.with_time(t_start + duration * s).with_continuous_state(
                context.get_continuous_state_vector()
            ),
            u,
        )
        return duration * self.plant._calc_time_derivatives_raw(pctx)


class _ShootingModel:
    """A segment of L of the N intervals of [0, T], simulated with ``simulate`` (fixed-step RK4,
    ``substeps`` steps per interval) in normalized time from (x_start, its L+1 input knots, T,
    t_start); records the states at its knots."""

    def __init__(self, system: System, context: Context, N: int, L: int, substeps: int) -> None:
        system.validate_context(context)
        self.port = _input_port(system)
        self.m = self.port.size()
        self.N, self.L = int(N), int(L)
        self.knot_s = np.arange(self.L + 1) / self.N
        self.wrapper = _OpenLoop(system, context, self.port, self.knot_s)
        dtype = context.get_time().dtype
        self.base = self.wrapper.create_default_context(dtype).with_continuous_state(
            context.get_continuous_state_vector()
        )
        self.integrator = RungeKutta4Integrator(max_step_size=1.0 / (self.N * substeps))
        self.x0 = context.get_continuous_state_vector()

    def rollout(self, x_start: jax.Array, u: jax.Array, T: Any, t_start: Any = 0.0) -> jax.Array:
        """States at the segment's knots, starting from x_start, under the first-order-hold input u."""
        dtype = self.base.get_time().dtype
        ctx = self.base.with_numeric_parameter(0, jnp.reshape(u, (-1,)).astype(dtype))
        ctx = ctx.with_numeric_parameter(1, jnp.stack([jnp.asarray(T, dtype), jnp.asarray(t_start, dtype)]))
        ctx = ctx.with_continuous_state(x_start)
        return simulate(
            self.wrapper, ctx, float(self.knot_s[-1]), self.integrator, save_at=self.knot_s, start_time=0.0
        ).ys


def direct_shooting(
    system: System,
    context: Context,
    T: float,
    num_intervals: int,
    running_cost: Callable[[jax.Array, jax.Array], jax.Array],
    final_cost: Callable[[jax.Array], jax.Array] | None = None,
    x_final: Any = None,
    u_limit: Any = None,
    num_segments: int = 1,
    substeps: int = 4,
    u_init: Any = None,
    u_lower: Any = None,
    u_upper: Any = None,
    x_lower: Any = None,
    x_upper: Any = None,
    final_time_bounds: tuple[float, float] | None = None,
    time_cost: float = 0.0,
    x_init: Any = None,
    solver: str = "slsqp",
    **solver_options: Any,
) -> TrajOptResult:
    """Direct shooting (``num_segments=1``) or multiple shooting (``num_segments>1``, segments
    simulated in one ``vmap`` with continuity constraints) from the state in ``context`` (Drake's
    ``MultipleShooting`` family, with the simulator as the integration rule).

    Args:
        system: the plant alone (one vector input port); it is not modified or taken over (it may be
            part of your own diagrams and be optimized any number of times).
        context: the plant's context; its continuous state is the initial state x0.
        T: the duration (seconds); with ``final_time_bounds`` the initial guess of a free duration.
        num_intervals: N input intervals (N + 1 knots, first-order hold).
        running_cost: ``(x (n,), u (m,)) -> scalar``, integrated over [0, T] (trapezoid on the knots).
        final_cost: ``x (n,) -> scalar``.
        x_final: a required final state (equality constraint).
        u_limit: |u| <= u_limit elementwise; or separate ``u_lower`` / ``u_upper``.
        x_lower, x_upper: bounds on the states at the knots after the first (``inf``: unbounded).
        num_segments: multiple-shooting segments (a divisor of N); 1 is single shooting.
        substeps: RK4 steps per interval.
        u_init: the initial guess of the inputs (broadcast to (N+1, m)).
        x_init: the initial guess of the states at the knots, (N+1, n) (multiple shooting uses the
            segments' start states; e.g. a collocation result's ``x``). Default: a straight line from
            x0 to ``x_final`` (or x0).
        final_time_bounds: (T_min, T_max) makes the duration a decision variable.
        time_cost: cost per second of duration (a minimum-time term, with a free final time).
        solver: ``"slsqp"`` (SciPy's SQP, the default), ``"augmented_lagrangian"`` (pure JAX) or ``"ipopt"``
            (IPOPT with sparse Jacobians: large problems; needs ``cyipopt-wheels``).
        solver_options: that solver's options (e.g. ``max_iterations``, ``tolerance``; see
            `slsqp`, [`augmented_lagrangian`][jaxsys.augmented_lagrangian] and [`ipopt`][jaxsys.ipopt]).
    """
    N, M = int(num_intervals), int(num_segments)
    if N % M:
        raise JaxsysError(f"direct_shooting: num_intervals ({N}) must be a multiple of num_segments ({M}).")
    L = N // M
    T0, t_bounds = _final_time(T, final_time_bounds, "direct_shooting")
    # one model for a segment of L intervals; all segments share one static step plan (normalized
    # time) and run as one vmapped scan, each from its own start time
    model = _ShootingModel(system, context, N, L, substeps)
    shape = (N + 1, model.m)
    u0 = jnp.zeros(shape) if u_init is None else jnp.broadcast_to(jnp.asarray(u_init, float), shape)
    x0 = model.x0
    n = x0.shape[0]

    def duration(z: dict[str, jax.Array]) -> jax.Array:
        return z["T"][0] if t_bounds is not None else jnp.asarray(T0, x0.dtype)

    # (jitted: the cost, the constraints and their derivatives all call it, and JAX then traces the
    # simulation once and reuses its jaxpr, rather than tracing it again for each: 11 traces of
    # ~0.3 s a call before)
    @jax.jit
    def segments(z: dict[str, jax.Array]) -> jax.Array:
        starts = jnp.concatenate([x0[None], z["s"]]) if M > 1 else x0[None]
        u_segs = jnp.stack([z["u"][j * L : j * L + L + 1] for j in range(M)])
        Tz = duration(z)
        t_starts = Tz * jnp.arange(M) * L / N
        return jax.vmap(model.rollout, in_axes=(0, 0, None, 0))(starts, u_segs, Tz, t_starts)  # (M, L + 1, n)

    def knots_of(segs: jax.Array) -> jax.Array:
        return jnp.concatenate([segs[:, :-1].reshape(-1, n), segs[-1, -1:]])

    def all_knots(z: dict[str, jax.Array]) -> jax.Array:
        return knots_of(segments(z))

    def cost(z: dict[str, jax.Array]) -> jax.Array:
        xs = all_knots(z)
        value = _trapezoid(jax.vmap(running_cost)(xs, z["u"]), duration(z) / N)
        if final_cost is not None:
            value = value + final_cost(xs[-1])
        return value + time_cost * duration(z)

    def equality(z: dict[str, jax.Array]) -> jax.Array:
        parts = [jnp.zeros((0,), x0.dtype)]
        segs = segments(z)
        if M > 1:
            parts.append((segs[:-1, -1] - z["s"]).ravel())  # continuity defects
        if x_final is not None:
            parts.append(knots_of(segs)[-1] - jnp.asarray(x_final, x0.dtype))
        return jnp.concatenate(parts)

    z0: dict[str, jax.Array] = {"u": u0}
    lo_u, hi_u = _bounds(u_limit, u_lower, u_upper, "direct_shooting")
    lower: dict[str, Any] = {"u": _box(lo_u, shape, -np.inf)}
    upper: dict[str, Any] = {"u": _box(hi_u, shape, np.inf)}
    if M > 1:  # initial segment states: x_init's, or a straight line from x0 to the goal (or x0)
        if x_init is not None:
            z0["s"] = jnp.broadcast_to(jnp.asarray(x_init, x0.dtype), (N + 1, n))[L:N:L]
        else:
            goal = jnp.asarray(x_final, x0.dtype) if x_final is not None else x0
            frac = jnp.arange(1, M)[:, None] / M
            z0["s"] = x0[None] + frac * (goal - x0)[None]
        lower["s"] = _box(x_lower, (M - 1, n), -np.inf)
        upper["s"] = _box(x_upper, (M - 1, n), np.inf)
    if t_bounds is not None:
        z0["T"] = jnp.asarray([T0])
        lower["T"], upper["T"] = np.array([t_bounds[0]]), np.array([t_bounds[1]])

    inequality = None
    if x_lower is not None or x_upper is not None:

        def inequality(z: dict[str, jax.Array]) -> jax.Array:
            return _box_constraints(all_knots(z)[1:], x_lower, x_upper)

    z, info = solve_nlp(cost, z0, equality, inequality, lower, upper, solver=solver, **solver_options)
    times = duration(z) * np.arange(N + 1) / N
    return _result("multiple_shooting" if M > 1 else "direct_shooting", times, z["u"], all_knots(z), info)


def _trapezoid(values: jax.Array, h: jax.Array) -> jax.Array:
    return h * (jnp.sum(values) - 0.5 * (values[0] + values[-1]))


def direct_collocation(
    system: System,
    context: Context,
    T: float,
    num_intervals: int,
    running_cost: Callable[[jax.Array, jax.Array], jax.Array],
    final_cost: Callable[[jax.Array], jax.Array] | None = None,
    x_final: Any = None,
    u_limit: Any = None,
    u_init: Any = None,
    u_lower: Any = None,
    u_upper: Any = None,
    x_lower: Any = None,
    x_upper: Any = None,
    final_time_bounds: tuple[float, float] | None = None,
    time_cost: float = 0.0,
    x_init: Any = None,
    solver: str = "slsqp",
    **solver_options: Any,
) -> TrajOptResult:
    """Hermite-Simpson direct collocation (Drake's ``DirectCollocation``) on the continuous dynamics of
    ``system`` (one vector input port) from the state in ``context``; the input is first-order hold
    between knots, the running cost integrated by Simpson's rule.

    Arguments as [`direct_shooting`][jaxsys.direct_shooting] (state bounds apply at the knots after the first), plus
    ``x_init``: the initial guess of the knot states, shape (N+1, n) (default: a straight line from
    x0 to ``x_final``, or x0).
    """
    port = _input_port(system)
    m = port.size()
    N = int(num_intervals)
    T0, t_bounds = _final_time(T, final_time_bounds, "direct_collocation")
    x0 = context.get_continuous_state_vector()
    n = x0.shape[0]
    s_grid = jnp.arange(N + 1) / N

    def duration(z: dict[str, jax.Array]) -> jax.Array:
        return z["T"][0] if t_bounds is not None else jnp.asarray(T0, x0.dtype)

    def f(x: jax.Array, u: jax.Array, t: jax.Array) -> jax.Array:
        ctx = port.fix_value(context.with_continuous_state(x).with_time(t), u)
        return system._calc_time_derivatives_raw(ctx)

    def unpack(z: dict[str, jax.Array]) -> jax.Array:
        return jnp.concatenate([x0[None], z["x"]])

    def defects_and_cost(z: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
        xs, us = unpack(z), z["u"]
        Tz = duration(z)
        h = Tz / N
        times = (Tz * s_grid).astype(x0.dtype)
        fs = jax.vmap(f)(xs, us, times)
        xm = 0.5 * (xs[:-1] + xs[1:]) + h / 8.0 * (fs[:-1] - fs[1:])
        um = 0.5 * (us[:-1] + us[1:])
        fm = jax.vmap(f)(xm, um, times[:-1] + 0.5 * h)
        defects = xs[1:] - xs[:-1] - h / 6.0 * (fs[:-1] + 4.0 * fm + fs[1:])
        lk = jax.vmap(running_cost)(xs, us)
        lm = jax.vmap(running_cost)(xm, um)
        value = jnp.sum(h / 6.0 * (lk[:-1] + 4.0 * lm + lk[1:]))
        if final_cost is not None:
            value = value + final_cost(xs[-1])
        return defects, value + time_cost * Tz

    def equality(z: dict[str, jax.Array]) -> jax.Array:
        d, _ = defects_and_cost(z)
        parts = [d.ravel()]
        if x_final is not None:
            parts.append(unpack(z)[-1] - jnp.asarray(x_final, x0.dtype))
        return jnp.concatenate(parts)

    lo_u, hi_u = _bounds(u_limit, u_lower, u_upper, "direct_collocation")
    goal = jnp.asarray(x_final, x0.dtype) if x_final is not None else x0
    if x_init is None:
        xs_init = x0[None] + (jnp.arange(1, N + 1)[:, None] / N) * (goal - x0)[None]
    else:
        xs_init = jnp.broadcast_to(jnp.asarray(x_init, x0.dtype), (N + 1, n))[1:]
    z0 = {
        "x": xs_init,
        "u": jnp.zeros((N + 1, m)) if u_init is None else jnp.broadcast_to(jnp.asarray(u_init, float), (N + 1, m)),
    }
    lower: dict[str, Any] = {"x": _box(x_lower, (N, n), -np.inf), "u": _box(lo_u, (N + 1, m), -np.inf)}
    upper: dict[str, Any] = {"x": _box(x_upper, (N, n), np.inf), "u": _box(hi_u, (N + 1, m), np.inf)}
    if t_bounds is not None:
        z0["T"] = jnp.asarray([T0], x0.dtype)
        lower["T"], upper["T"] = np.array([t_bounds[0]]), np.array([t_bounds[1]])
    z, info = solve_nlp(
        lambda z: defects_and_cost(z)[1], z0, equality, None, lower, upper, solver=solver, **solver_options
    )
    times = np.asarray(duration(z)) * np.arange(N + 1) / N
    return _result("direct_collocation", times, z["u"], unpack(z), info)


def _result(method: str, times: Any, u: jax.Array, x: jax.Array, info: dict[str, Any]) -> TrajOptResult:
    violation, tolerance = info["violation"], info["tolerance"]
    success = bool(info["converged"])
    if not success:
        opts = ", ".join(f"{k} (now {v})" for k, v in info["options"].items())
        warnings.warn(
            f"{method}: did not converge ({info['message']}): constraint violation {violation:.3g} "
            f"(tolerance {tolerance:g}) after {info['iterations']} iterations of {info['solver']} (cost "
            f"{info['objective']:.4g}). Options that control convergence: {opts}, tolerance; the other "
            f"solver (solver='slsqp' or 'augmented_lagrangian'); a better initial guess (u_init, x_init) "
            f"or more knots also help. result.success is False.",
            stacklevel=3,
        )
    return TrajOptResult(
        method,
        np.asarray(times),
        np.asarray(u),
        np.asarray(x),
        info["objective"],
        violation,
        info["iterations"],
        PiecewisePolynomial.first_order_hold(np.asarray(times), np.asarray(u)),
        success,
        tolerance,
        info["solver"],
        info["message"],
    )


def simulate_open_loop(system: System, context: Context, result: TrajOptResult, substeps: int = 20) -> np.ndarray:
    """Simulate ``system`` from ``context`` under the optimized input (first-order hold) with the
    simulator (RK4, ``substeps`` steps per interval); returns the states at the knot times, shape (N+1, n)."""
    N = len(result.times) - 1
    model = _ShootingModel(system, context, N, N, substeps)
    return np.asarray(model.rollout(model.x0, jnp.asarray(result.u), result.final_time))
