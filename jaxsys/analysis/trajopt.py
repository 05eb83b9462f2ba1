"""Trajectory optimization on jaxsys systems: direct (single) shooting, multiple shooting and direct
collocation (Hermite-Simpson), with input limits and a final-state constraint.

* The input is a first-order-hold trajectory through knots u_0..u_N on a uniform grid. Shooting
  simulates the plant under it with the ordinary simulator (a small wrapper system holds the plant and
  interpolates the knots: the user's plant is never added to a diagram or changed), and the optimized
  input is a :class:`~jaxsys.PiecewisePolynomial` that can be fed to the plant with a
  :class:`~jaxsys.TrajectorySource`.
* Shooting simulates with ``simulate`` (fixed-step RK4, ``substeps`` steps per interval); multiple
  shooting simulates its segments in one ``vmap`` and adds continuity ("defect") constraints.
* Collocation evaluates the plant's time derivatives at the knots and interval midpoints (vmapped)
  and imposes the Hermite-Simpson defects.
* Constraints are handled by an augmented Lagrangian (multiplier and penalty updates) whose inner
  problems are solved with L-BFGS (optax); the result reports the remaining constraint violation.

Costs: ``running_cost(x, u) -> scalar`` integrated over time, ``final_cost(x) -> scalar``.

Imports (within jaxsys): the framework's ``context``, ``diagram_builder``, ``errors``, ``system``;
``primitives/sources``, ``integrators``, ``simulate``.
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
import optax

from ..framework.context import Context
from ..framework.errors import JaxsysError
from ..framework.leaf_system import LeafSystem
from ..framework.system import System
from ..primitives.sources import PiecewisePolynomial
from .integrators import RungeKutta4Integrator
from .simulate import simulate


@dataclasses.dataclass
class TrajOptResult:
    """The outcome of a trajectory optimization.

    **Fields:** `method`; `times` (N+1,) knot times; `u` (N+1, m) input knots; `x` (N+1, n) states at
    the knots (from the method's own model); `cost`; `constraint_violation` (max abs over equality
    constraints and positive parts of inequalities); `outer_iterations`; `input_trajectory` (a
    first-order-hold PiecewisePolynomial of `u`); `success` (the violation is finite and at most
    `tolerance`; when it is not, a warning names the options that control convergence).
    """

    method: str
    times: np.ndarray
    u: np.ndarray
    x: np.ndarray
    cost: float
    constraint_violation: float
    outer_iterations: int
    input_trajectory: PiecewisePolynomial
    success: bool = False
    tolerance: float = 1e-6


def augmented_lagrangian(
    objective: Callable[[Any], jax.Array],
    z0: Any,
    equality: Callable[[Any], jax.Array] | None = None,
    inequality: Callable[[Any], jax.Array] | None = None,
    outer_iterations: int = 20,
    inner_iterations: int = 100,
    penalty: float = 100.0,
    penalty_growth: float = 10.0,
    max_penalty: float = 1e8,
    tolerance: float = 1e-6,
) -> tuple[Any, dict[str, Any]]:
    """Minimize ``objective(z)`` s.t. ``equality(z) = 0`` and ``inequality(z) <= 0`` (Powell-Hestenes-
    Rockafellar augmented Lagrangian; each inner problem solved by ``inner_iterations`` of L-BFGS).

    Returns (z, info) with info = {"violation", "objective", "outer_iterations"}.
    """
    flat0, unravel = jax.flatten_util.ravel_pytree(z0)
    eq = (lambda z: equality(unravel(z))) if equality is not None else (lambda z: jnp.zeros((0,), flat0.dtype))
    ineq = (lambda z: inequality(unravel(z))) if inequality is not None else (lambda z: jnp.zeros((0,), flat0.dtype))
    obj = lambda z: objective(unravel(z))  # noqa: E731
    n_eq, n_in = eq(flat0).shape[0], ineq(flat0).shape[0]

    def lagrangian(z: jax.Array, lam: jax.Array, nu: jax.Array, mu: jax.Array) -> jax.Array:
        c = eq(z)
        g = ineq(z)
        value = obj(z) + lam @ c + 0.5 * mu * c @ c
        shifted = jnp.maximum(0.0, nu + mu * g)
        return value + (shifted @ shifted - nu @ nu) / (2.0 * mu)

    @jax.jit
    def inner(z: jax.Array, lam: jax.Array, nu: jax.Array, mu: jax.Array) -> jax.Array:
        fun = lambda zz: lagrangian(zz, lam, nu, mu)  # noqa: E731
        opt = optax.lbfgs()
        value_and_grad = optax.value_and_grad_from_state(fun)

        def step(_: int, carry: tuple[jax.Array, Any]) -> tuple[jax.Array, Any]:
            z, state = carry
            value, grad = value_and_grad(z, state=state)
            updates, state = opt.update(grad, state, z, value=value, grad=grad, value_fn=fun)
            return optax.apply_updates(z, updates), state

        z, _ = jax.lax.fori_loop(0, inner_iterations, step, (z, opt.init(z)))
        return z

    def violation(z: jax.Array) -> float:
        parts = [jnp.abs(eq(z)), jnp.maximum(ineq(z), 0.0)]
        return float(jnp.max(jnp.concatenate([p for p in parts if p.size] or [jnp.zeros(1)])))

    z = flat0
    lam = jnp.zeros((n_eq,), flat0.dtype)
    nu = jnp.zeros((n_in,), flat0.dtype)
    mu = penalty
    used = 0
    for used in range(1, outer_iterations + 1):  # noqa: B007 - the count is reported
        z = inner(z, lam, nu, jnp.asarray(mu))
        if violation(z) <= tolerance:
            break
        lam = lam + mu * eq(z)
        nu = jnp.maximum(0.0, nu + mu * ineq(z))
        mu = min(mu * penalty_growth, max_penalty)
    return unravel(z), {
        "violation": violation(z),
        "objective": float(obj(z)),
        "outer_iterations": used,
        "tolerance": tolerance,
        "options": {"outer_iterations": outer_iterations, "inner_iterations": inner_iterations, "penalty": penalty},
    }


def _input_port(system: System) -> Any:
    ports = [p for p in system._spec.input_ports if not p.is_abstract()]
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
        return -lim, lim
    if lower is not None and upper is not None and np.any(np.asarray(lower, float) > np.asarray(upper, float)):
        raise JaxsysError(f"{what}: a lower bound is above its upper bound ({lower} > {upper}).")
    return lower, upper


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


def _trapezoid(values: jax.Array, h: float) -> jax.Array:
    return h * (jnp.sum(values) - 0.5 * (values[0] + values[-1]))


class _OpenLoop(LeafSystem):
    """The plant under a first-order-hold input whose knots are this system's numeric parameter: its
    state is the plant's continuous state, its dynamics the plant's with the input interpolated. The
    plant is held as a field, never added to a diagram, so the same plant can be optimized, simulated
    and used in the user's own diagrams any number of times."""

    plant: System
    plant_context: Context
    port_index: int = eqx.field(static=True)
    times: tuple[float, ...] = eqx.field(static=True)
    m: int = eqx.field(static=True)

    def __init__(self, plant: System, context: Context, port: Any, times: np.ndarray) -> None:
        super().__init__("open_loop")
        self.plant = plant
        self.plant_context = context
        self.port_index = port.get_index()
        self.times = tuple(float(t) for t in times)
        self.m = port.size()
        cs = context.get_continuous_state()
        self.declare_continuous_state(cs.num_q, cs.num_v, cs.num_z)
        self.declare_numeric_parameter(np.zeros(len(times) * self.m))

    def do_calc_time_derivatives(self, context: Context) -> jax.Array:
        knots = context.get_numeric_parameter(0).reshape(len(self.times), self.m)
        t = context.get_time()
        u = jax.vmap(lambda col: jnp.interp(t, jnp.asarray(self.times, t.dtype), col), out_axes=0)(knots.T)
        port = self.plant.get_input_port(self.port_index)
        pctx = port.fix_value(
            self.plant_context.with_time(t).with_continuous_state(context.get_continuous_state_vector()), u
        )
        return self.plant._calc_time_derivatives_raw(pctx)


class _ShootingModel:
    """The plant driven by a first-order-hold input (:class:`_OpenLoop`); simulates from (x0, u
    knots) with ``simulate`` and records the states at the knots."""

    def __init__(self, system: System, context: Context, T: float, N: int, substeps: int) -> None:
        system.validate_context(context)
        self.port = _input_port(system)
        self.m = self.port.size()
        self.T, self.N = float(T), int(N)
        self.h = self.T / self.N
        self.times = np.linspace(0.0, self.T, self.N + 1)
        self.wrapper = _OpenLoop(system, context, self.port, self.times)
        dtype = context.get_time().dtype
        self.base = self.wrapper.create_default_context(dtype).with_continuous_state(
            context.get_continuous_state_vector()
        )
        self.integrator = RungeKutta4Integrator(max_step_size=self.h / substeps)
        self.x0 = context.get_continuous_state_vector()

    def rollout(self, x_start: jax.Array, u: jax.Array) -> jax.Array:
        """States at all knots, starting from x_start, under the first-order-hold input u."""
        ctx = self.base.with_numeric_parameter(0, jnp.reshape(u, (-1,)).astype(self.base.get_time().dtype))
        ctx = ctx.with_continuous_state(x_start)
        return simulate(self.wrapper, ctx, self.T, self.integrator, save_at=self.times, start_time=0.0).ys


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
    **solver_options: Any,
) -> TrajOptResult:
    """Direct shooting (``num_segments=1``) or multiple shooting (``num_segments>1``, segments
    simulated in one ``vmap`` with continuity constraints) from the state in ``context``.

    ``x_final``: a required final state (equality constraint); ``u_limit``: |u| <= u_limit elementwise,
    or separate ``u_lower`` / ``u_upper``; ``x_lower`` / ``x_upper``: bounds on the states at the knots
    (``inf`` entries are unbounded). Solver options (``outer_iterations``, ``inner_iterations``,
    ``penalty``, ``tolerance``...): see :func:`augmented_lagrangian`.
    ``system`` is the plant alone (one vector input port); it is not modified or taken over (it may
    be part of your own diagrams and be optimized any number of times).
    """
    N, M = int(num_intervals), int(num_segments)
    if N % M:
        raise JaxsysError(f"direct_shooting: num_intervals ({N}) must be a multiple of num_segments ({M}).")
    L = N // M
    # one model for a segment of L intervals; every segment runs on its own clock from t = 0, so all
    # of them share one static step plan and run as one vmapped scan
    model = _ShootingModel(system, context, float(T) / M, L, substeps)
    times = np.linspace(0.0, float(T), N + 1)
    shape = (N + 1, model.m)
    u0 = jnp.zeros(shape) if u_init is None else jnp.broadcast_to(jnp.asarray(u_init, float), shape)
    x0 = model.x0

    def segments(z: dict[str, jax.Array]) -> jax.Array:
        starts = jnp.concatenate([x0[None], z["s"]]) if M > 1 else x0[None]
        u_segs = jnp.stack([z["u"][j * L : j * L + L + 1] for j in range(M)])
        return jax.vmap(model.rollout)(starts, u_segs)  # (M, L + 1, n)

    def all_knots(z: dict[str, jax.Array]) -> jax.Array:
        segs = segments(z)
        return jnp.concatenate([segs[:, :-1].reshape(-1, x0.shape[0]), segs[-1, -1:]])

    def cost(z: dict[str, jax.Array]) -> jax.Array:
        xs = all_knots(z)
        value = _trapezoid(jax.vmap(running_cost)(xs, z["u"]), model.h)
        if final_cost is not None:
            value = value + final_cost(xs[-1])
        return value

    def equality(z: dict[str, jax.Array]) -> jax.Array:
        parts = []
        if M > 1:
            segs = segments(z)
            parts.append((segs[:-1, -1] - z["s"]).ravel())  # continuity defects
        if x_final is not None:
            parts.append(all_knots(z)[-1] - jnp.asarray(x_final, float))
        return jnp.concatenate(parts) if parts else jnp.zeros((0,))

    z0: dict[str, jax.Array] = {"u": u0}
    if M > 1:  # initial segment states: a straight line from x0 to the goal (or x0)
        goal = jnp.asarray(x_final, float) if x_final is not None else x0
        frac = jnp.arange(1, M)[:, None] / M
        z0["s"] = x0[None] + frac * (goal - x0)[None]
    lo, hi = _bounds(u_limit, u_lower, u_upper, "direct_shooting")

    def inequality(z: dict[str, jax.Array]) -> jax.Array:
        parts = [_box_constraints(z["u"], lo, hi)]
        if x_lower is not None or x_upper is not None:
            parts.append(_box_constraints(all_knots(z)[1:], x_lower, x_upper))
        return jnp.concatenate(parts)

    z, info = augmented_lagrangian(cost, z0, equality, inequality, **solver_options)
    return _result("multiple_shooting" if M > 1 else "direct_shooting", times, z["u"], all_knots(z), info)


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
    **solver_options: Any,
) -> TrajOptResult:
    """Hermite-Simpson direct collocation on the continuous dynamics of ``system`` (one vector input
    port) from the state in ``context``; the input is first-order hold between knots. Bounds as in
    :func:`direct_shooting` (state bounds apply at the knots)."""
    port = _input_port(system)
    m = port.size()
    N = int(num_intervals)
    h = float(T) / N
    times = np.linspace(0.0, float(T), N + 1)
    x0 = context.get_continuous_state_vector()

    def f(x: jax.Array, u: jax.Array, t: jax.Array) -> jax.Array:
        ctx = port.fix_value(context.with_continuous_state(x).with_time(t), u)
        return system._calc_time_derivatives_raw(ctx)

    def unpack(z: dict[str, jax.Array]) -> jax.Array:
        return jnp.concatenate([x0[None], z["x"]])

    def defects_and_cost(z: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
        xs, us = unpack(z), z["u"]
        fs = jax.vmap(f)(xs, us, jnp.asarray(times))
        xm = 0.5 * (xs[:-1] + xs[1:]) + h / 8.0 * (fs[:-1] - fs[1:])
        um = 0.5 * (us[:-1] + us[1:])
        fm = jax.vmap(f)(xm, um, jnp.asarray(times[:-1] + 0.5 * h))
        defects = xs[1:] - xs[:-1] - h / 6.0 * (fs[:-1] + 4.0 * fm + fs[1:])
        lk = jax.vmap(running_cost)(xs, us)
        lm = jax.vmap(running_cost)(xm, um)
        value = jnp.sum(h / 6.0 * (lk[:-1] + 4.0 * lm + lk[1:]))
        if final_cost is not None:
            value = value + final_cost(xs[-1])
        return defects, value

    def equality(z: dict[str, jax.Array]) -> jax.Array:
        d, _ = defects_and_cost(z)
        parts = [d.ravel()]
        if x_final is not None:
            parts.append(unpack(z)[-1] - jnp.asarray(x_final, float))
        return jnp.concatenate(parts)

    lo, hi = _bounds(u_limit, u_lower, u_upper, "direct_collocation")

    def inequality(z: dict[str, jax.Array]) -> jax.Array:
        parts = [_box_constraints(z["u"], lo, hi)]
        if x_lower is not None or x_upper is not None:
            parts.append(_box_constraints(z["x"], x_lower, x_upper))
        return jnp.concatenate(parts)

    goal = jnp.asarray(x_final, float) if x_final is not None else x0
    frac = jnp.arange(1, N + 1)[:, None] / N
    z0 = {
        "x": x0[None] + frac * (goal - x0)[None],
        "u": jnp.zeros((N + 1, m)) if u_init is None else jnp.broadcast_to(jnp.asarray(u_init, float), (N + 1, m)),
    }
    z, info = augmented_lagrangian(lambda z: defects_and_cost(z)[1], z0, equality, inequality, **solver_options)
    return _result("direct_collocation", times, z["u"], unpack(z), info)


def _result(method: str, times: np.ndarray, u: jax.Array, x: jax.Array, info: dict[str, Any]) -> TrajOptResult:
    violation, tolerance = info["violation"], info["tolerance"]
    success = bool(np.isfinite(violation) and np.isfinite(info["objective"]) and violation <= tolerance)
    if not success:
        opts = info["options"]
        warnings.warn(
            f"{method}: did not converge: constraint violation {violation:.3g} > tolerance {tolerance:g} after "
            f"{info['outer_iterations']} outer iterations (cost {info['objective']:.4g}). Options that control "
            f"convergence: outer_iterations (now {opts['outer_iterations']}), inner_iterations (now "
            f"{opts['inner_iterations']}), penalty (now {opts['penalty']}), tolerance; a better initial guess "
            f"(u_init) or more knots also help. result.success is False.",
            stacklevel=3,
        )
    return TrajOptResult(
        method,
        np.asarray(times),
        np.asarray(u),
        np.asarray(x),
        info["objective"],
        violation,
        info["outer_iterations"],
        PiecewisePolynomial.first_order_hold(times, np.asarray(u)),
        success,
        tolerance,
    )


def simulate_open_loop(system: System, context: Context, result: TrajOptResult, substeps: int = 20) -> np.ndarray:
    """Simulate ``system`` from ``context`` under the optimized input (first-order hold) with the
    simulator; returns the states at the knot times, shape (N+1, n)."""
    model = _ShootingModel(system, context, float(result.times[-1]), len(result.times) - 1, substeps)
    return np.asarray(model.rollout(model.x0, jnp.asarray(result.u)))
