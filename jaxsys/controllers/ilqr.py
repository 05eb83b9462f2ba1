"""Iterative LQR (the trajax algorithm family) on the discrete-time system a plant and an integrator
step define.

The plant (one vector input port) is discretized with a zero-order-hold input: ``x[k+1] = F(x[k],
u[k])`` is ``substeps`` fixed steps of ``integrator`` over ``h = T / N`` (the same map a fixed-step
``simulate`` computes under a zero-order-hold input, so the optimized inputs replay exactly). The cost
is ``sum_k h * running_cost(x[k], u[k]) + final_cost(x[N])``; a running cost may also take the knot
index ``k`` (``running_cost(x, u, k)``: time-varying weights, a reference indexed by ``k``), and both
costs a ``reference`` pytree passed as an argument (tracking a trajectory that changes between MPC
solves without recompiling).

Each iteration linearizes ``F`` (``jax.jacfwd``) and quadratizes the costs (``jax.hessian``) along the
current trajectory, runs the Riccati backward pass with Levenberg-Marquardt regularization ``mu`` of
``Q_uu`` (increased until ``Q_uu`` is positive definite), and rolls the feedback policy forward for
several line-search step sizes at once (``vmap``), keeping the best one that lowers the cost by at
least a fraction of the predicted decrease. Input bounds are enforced by clipping in the forward pass.
Iterations run in one compiled function, called from Python until the relative cost decrease is
below ``tolerance``.

Imports (within jaxsys): the framework; ``analysis`` (``integrators``, ``compile_cache``).
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..analysis.compile_cache import SystemCache, deref, hashable_key
from ..analysis.integrators import IntegratorBase, RungeKutta4Integrator
from ..analysis.integrators.base import rolled_stages, step_aux
from ..analysis.precision import full_precision
from ..framework.context import Context
from ..framework.errors import JaxsysError
from ..framework.system import System


Array = jax.Array

LINE_SEARCH = (1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125)


@dataclasses.dataclass
class ILQRResult:
    """The outcome of [`ilqr`][jaxsys.ilqr].

    **Fields:** `times` (N+1,), `x` (N+1, n) states, `u` (N, m) inputs (held over each interval),
    `cost`, `cost_history`, `iterations`, `converged` (relative cost decrease below the tolerance),
    `success` (converged with a finite cost, and not stuck at its start), `K` (N, m, n) and `k` (N, m):
    the final feedback gains and feedforward terms (``u = u[k] + K[k] (x - x[k])`` tracks the
    trajectory), `regularization`, `stationary_start` (True when the initial inputs were a stationary
    point of the cost that is not a minimum, so that iLQR took no step: perturb ``u_init``; a warning
    says so and `success` is False).
    """

    times: np.ndarray
    x: np.ndarray
    u: np.ndarray
    cost: float
    cost_history: np.ndarray
    iterations: int
    converged: bool
    success: bool
    K: np.ndarray
    k: np.ndarray
    regularization: float
    stationary_start: bool = False


def _box_gains(Quu: Array, Qu: Array, Qux: Array, lo: Array, hi: Array, iterations: int = 8) -> tuple[Array, Array]:
    """Feedforward ``k`` minimizing ``k^T Quu k / 2 + Qu^T k`` over the box ``lo <= k <= hi`` by a
    projected Newton method on the active set (Tassa, Mansard and Todorov, "Control-limited
    differential dynamic programming", 2014), and the feedback ``K`` on the free inputs (rows of the
    clamped ones are zero: the bound, not the state, decides them). Without bounds this is the
    ordinary ``-Quu^-1 (Qu, Qux)``."""
    m = Qu.shape[0]
    eye = jnp.eye(m, dtype=Quu.dtype)

    def masked_solve(free: Array, rhs: Array) -> Array:
        both = free[:, None] & free[None, :]
        M = jnp.where(both, Quu, eye)
        r = jnp.where(free.reshape((-1,) + (1,) * (rhs.ndim - 1)), rhs, 0.0)
        return jnp.linalg.solve(M, r)

    k = jnp.clip(-jnp.linalg.solve(Quu, Qu), lo, hi)

    def body(_: Any, k: Array) -> Array:
        grad = Quu @ k + Qu
        clamped = ((k <= lo) & (grad > 0)) | ((k >= hi) & (grad < 0))
        free = ~clamped
        # Newton step on the free inputs, the clamped ones fixed at their bound
        k_free = -masked_solve(free, Qu + Quu @ jnp.where(free, 0.0, k))
        return jnp.clip(jnp.where(free, k_free, k), lo, hi)

    k = jax.lax.fori_loop(0, iterations, body, k)
    grad = Quu @ k + Qu
    free = ~(((k <= lo) & (grad > 0)) | ((k >= hi) & (grad < 0)))
    K = -masked_solve(free, Qux)
    return K, k


def _control_port(system: System, caller: str) -> Any:
    """The plant's one vector input port (the input to optimize), or a clear error."""
    ports = [system.get_input_port(i) for i in range(system.num_input_ports())]
    ports = [p for p in ports if not p.is_abstract()]
    if len(ports) != 1:
        raise JaxsysError(
            f"{caller}: the plant needs exactly one vector input port (the input to optimize); System "
            f"{system.get_system_id_string()} has {len(ports)}."
        )
    return ports[0]


def discrete_dynamics(
    system: System, context: Context, h: float, integrator: IntegratorBase | None = None, substeps: int = 1
) -> Callable[[Array, Array], Array]:
    """The zero-order-hold discretization of a plant: ``F(x, u)``, the continuous state (shape (n,))
    after ``h`` seconds from ``x`` under the constant input ``u`` (shape (m,), the plant's one vector
    input port), by ``substeps`` steps of the fixed-step ``integrator`` (default RK4), with the other
    inputs and the parameters of ``context`` (Drake: ``DiscreteTimeApproximation`` of a nonlinear
    system). The map ``ilqr`` optimizes over and ``ilqr_solve`` takes; pure, so ``jax.jacfwd``,
    ``jax.vmap`` and ``jit`` apply."""
    port = _control_port(system, "discrete_dynamics")
    integ = integrator or RungeKutta4Integrator(max_step_size=h / substeps)
    dt = h / substeps
    # large dynamics (a MuJoCo plant) evaluate the Runge-Kutta stages in a loop, as in `simulate`: one
    # copy of the dynamics per step in each program (rollout, linearization, line search), not one per
    # stage (MJX cart-pole, 60 knots: iLQR's first call 17.0 -> 9.0 s)
    x_0 = context.get_continuous_state_vector()
    u_0 = jnp.zeros((port.size(),), x_0.dtype)
    rolled = rolled_stages(system, system.vector_field(port.fix_value(context, u_0)), context.get_time(), x_0)

    def F(x: Array, u: Array) -> Array:
        ctx = port.fix_value(context, u)
        f = system.vector_field(ctx)
        aux = step_aux(system, ctx, rolled=rolled)

        def sub(i: Any, xx: Array) -> Array:
            return integ.attempt_step(f, jnp.asarray(i * dt, x.dtype), xx, jnp.asarray(dt, x.dtype), aux)[0]

        # (full-precision matrix products, as `simulate`'s runs: a GPU's float32 default is TensorFloat-32)
        with full_precision():
            return jax.lax.fori_loop(0, substeps, sub, x)

    return F


def _input_box(lower: Any, upper: Any, m: int, dtype: Any) -> tuple[Array, Array]:
    """Input bounds as (m,) arrays (None: unbounded)."""
    lo = jnp.full((m,), -jnp.inf, dtype) if lower is None else jnp.broadcast_to(jnp.asarray(lower, dtype), (m,))
    hi = jnp.full((m,), jnp.inf, dtype) if upper is None else jnp.broadcast_to(jnp.asarray(upper, dtype), (m,))
    return lo, hi


def _positional_arity(fn: Callable[..., Any]) -> int | None:
    """How many positional arguments ``fn`` requires (None when it takes ``*args`` or cannot be read)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in params if p.kind in kinds and p.default is inspect.Parameter.empty)


def _costs(
    running_cost: Callable[..., Array], final_cost: Callable[..., Array], reference: Any, where: str
) -> tuple[Callable[[Array, Array, Array], Array], Callable[[Array], Array]]:
    """The costs as ``rc(x, u, k)`` and ``fc(x)``, from the forms a user may write:
    ``running_cost(x, u)`` or ``running_cost(x, u, k)`` (k the knot index, 0..N-1: the time is
    ``t0 + k h``) and ``final_cost(x)``; with a ``reference``, ``running_cost(x, u, k, reference)`` and
    ``final_cost(x, reference)``."""
    n_rc, n_fc = _positional_arity(running_cost), _positional_arity(final_cost)
    if reference is not None:
        if n_rc not in (None, 4) or n_fc not in (None, 2):
            raise JaxsysError(
                f"{where}: with a reference, the costs are running_cost(x, u, k, reference) and final_cost(x, "
                f"reference); got functions of {n_rc} and {n_fc} positional arguments."
            )
        return (lambda x, u, k: running_cost(x, u, k, reference)), (lambda x: final_cost(x, reference))
    if n_rc not in (None, 2, 3) or n_fc not in (None, 1):
        raise JaxsysError(
            f"{where}: the costs are running_cost(x, u) or running_cost(x, u, k) (k: the knot index) and "
            f"final_cost(x) (pass reference=... for running_cost(x, u, k, reference) and final_cost(x, "
            f"reference)); got functions of {n_rc} and {n_fc} positional arguments."
        )
    if n_rc == 3:
        return running_cost, final_cost
    return (lambda x, u, k: running_cost(x, u)), final_cost


def _ilqr_functions(
    F: Callable[[Array, Array], Array],
    running_cost: Callable[[Array, Array, Array], Array],
    final_cost: Callable[[Array], Array],
    h: float,
    lo: Array,
    hi: Array,
) -> tuple[Any, Any, Any]:
    """The pure pieces of iLQR for the discrete map ``F`` and the costs ``running_cost(x, u, k)``,
    ``final_cost(x)``: ``rollout(x0, u)``, ``total_cost(xs, u)`` and
    one iteration ``iterate(x0, xs, u, cost, mu) -> (xs, u, cost, mu, accepted, K, k, alpha,
    predicted decrease)``."""

    def rollout(x0: Array, u: Array) -> Array:
        def step(x: Array, uk: Array) -> tuple[Array, Array]:
            x_next = F(x, uk)
            return x_next, x_next

        _, xs = jax.lax.scan(step, x0, u)
        return jnp.concatenate([x0[None], xs])

    def knots(u: Array) -> Array:
        return jnp.arange(u.shape[0], dtype=jnp.int32)

    def total_cost(xs: Array, u: Array) -> Array:
        return h * jnp.sum(jax.vmap(running_cost)(xs[:-1], u, knots(u))) + final_cost(xs[-1])

    def backward(xs: Array, u: Array, mu: Array) -> tuple[Array, Array, Array, Array]:
        """Gains (K, k), the predicted decrease terms, and whether every Q_uu was positive definite."""
        fx, fu = jax.vmap(jax.jacfwd(F, argnums=(0, 1)))(xs[:-1], u)
        ks = knots(u)
        lx, lu = jax.vmap(jax.grad(running_cost, argnums=(0, 1)))(xs[:-1], u, ks)
        (lxx, lxu), (_, luu) = jax.vmap(jax.hessian(running_cost, argnums=(0, 1)))(xs[:-1], u, ks)
        Vx = jax.grad(final_cost)(xs[-1])
        Vxx = jax.hessian(final_cost)(xs[-1])

        def step(carry: Any, inp: Any) -> tuple[Any, Any]:
            Vx, Vxx, ok = carry
            A, B, lx_, lu_, lxx_, lxu_, luu_, u_ref = inp
            Qx = h * lx_ + A.T @ Vx
            Qu = h * lu_ + B.T @ Vx
            Qxx = h * lxx_ + A.T @ Vxx @ A
            Qux = h * lxu_.T + B.T @ Vxx @ A
            Quu = h * luu_ + B.T @ Vxx @ B
            Quu_reg = 0.5 * (Quu + Quu.T) + mu * jnp.eye(Quu.shape[0], dtype=Quu.dtype)
            chol = jnp.linalg.cholesky(Quu_reg)
            ok = ok & jnp.all(jnp.isfinite(chol))
            K, kff = _box_gains(Quu_reg, Qu, Qux, lo - u_ref, hi - u_ref)
            Vx = Qx + K.T @ Quu @ kff + K.T @ Qu + Qux.T @ kff
            Vxx = Qxx + K.T @ Quu @ K + K.T @ Qux + Qux.T @ K
            Vxx = 0.5 * (Vxx + Vxx.T)
            return (Vx, Vxx, ok), (K, kff, kff @ Qu, 0.5 * kff @ Quu @ kff)

        (_, _, ok), (K, kff, d1, d2) = jax.lax.scan(
            step, (Vx, Vxx, jnp.array(True)), (fx, fu, lx, lu, lxx, lxu, luu, u), reverse=True
        )
        return K, kff, jnp.stack([jnp.sum(d1), jnp.sum(d2)]), ok

    def forward(x0: Array, xs: Array, u: Array, K: Array, kff: Array, alpha: Array) -> tuple[Array, Array, Array]:
        def step(x: Array, inp: Any) -> tuple[Array, Any]:
            x_ref, u_ref, K_, k_ = inp
            uk = jnp.clip(u_ref + alpha * k_ + K_ @ (x - x_ref), lo, hi)
            return F(x, uk), (x, uk)

        x_end, (x_new, u_new) = jax.lax.scan(step, x0, (xs[:-1], u, K, kff))
        x_new = jnp.concatenate([x_new, x_end[None]])
        return x_new, u_new, total_cost(x_new, u_new)

    def iterate(x0: Array, xs: Array, u: Array, cost: Array, mu: Array) -> Any:
        alphas = jnp.asarray(LINE_SEARCH, xs.dtype)
        K, kff, dV, ok = backward(xs, u, mu)
        x_try, u_try, c_try = jax.vmap(lambda a: forward(x0, xs, u, K, kff, a))(alphas)
        expected = -(alphas * dV[0] + alphas**2 * dV[1])  # predicted decrease, >= 0
        good = ok & jnp.isfinite(c_try) & (cost - c_try >= 1e-4 * expected) & (c_try < cost)
        j = jnp.argmax(good)  # the largest step that is good
        accept = jnp.any(good)
        xs_new = jnp.where(accept, x_try[j], xs)
        u_new = jnp.where(accept, u_try[j], u)
        c_new = jnp.where(accept, c_try[j], cost)
        # Levenberg-Marquardt schedule: relax after an accepted full-ish step, stiffen otherwise
        mu_new = jnp.where(accept, jnp.maximum(mu / 4.0, 1e-9), jnp.minimum(jnp.maximum(mu * 10.0, 1e-6), 1e12))
        return xs_new, u_new, c_new, mu_new, accept, K, kff, alphas[j], expected[0]

    return rollout, total_cost, iterate


def ilqr_solve(
    F: Callable[[Array, Array], Array],
    running_cost: Callable[..., Array],
    final_cost: Callable[..., Array],
    h: float,
    x0: Array,
    u_init: Array,
    u_lower: Any = None,
    u_upper: Any = None,
    iterations: int = 5,
    regularization: float = 1.0,
    reference: Any = None,
) -> tuple[Array, Array, Array]:
    """A fixed number of iLQR iterations as one pure, jit-able and vmap-able function (for model
    predictive control inside a simulation: warm-start ``u_init`` with the last solution shifted;
    ``examples/mpc_pendulum.py``). ``F(x, u)`` is the discrete map (``js.discrete_dynamics``), ``h``
    its interval. The costs: ``running_cost(x, u)`` or ``running_cost(x, u, k)`` (``k`` the knot index
    0..N-1, an int32 scalar: the time from the start is ``k h``) and ``final_cost(x)``; with a
    ``reference`` (any pytree, e.g. the states to track, of shape (N + 1, n): an argument, so a
    compiled solver takes a new one without recompiling), ``running_cost(x, u, k, reference)`` and
    ``final_cost(x, reference)`` (index it with ``k``). The regularization starts high (1.0: a few
    iterations must make progress even where the cost is not convex, e.g. a pendulum at the bottom
    with an upright goal) and is divided by 4 at every accepted iteration. Returns ``(u, xs, cost)``."""
    dtype = jnp.result_type(x0)
    m = u_init.shape[-1]
    lo, hi = _input_box(u_lower, u_upper, m, dtype)
    rc, fc = _costs(running_cost, final_cost, reference, "ilqr_solve")
    rollout, total_cost, iterate = _ilqr_functions(F, rc, fc, h, lo, hi)
    u = jnp.clip(jnp.asarray(u_init, dtype), lo, hi)
    xs = rollout(x0, u)

    def body(_: Any, c: Any) -> Any:
        xs, u, cost, mu = c
        xs, u, cost, mu = iterate(x0, xs, u, cost, mu)[:4]
        return xs, u, cost, mu

    xs, u, cost, _ = jax.lax.fori_loop(
        0, iterations, body, (xs, u, total_cost(xs, u), jnp.asarray(regularization, dtype))
    )
    return u, xs, cost


_ILQR_CACHE: SystemCache[Any] = SystemCache("ilqr", maxsize=32)


def _ilqr_program(
    system: System,
    h: float,
    integrator: IntegratorBase | None,
    substeps: int,
    running_cost: Callable[..., Array],
    final_cost: Callable[..., Array],
    with_reference: bool,
) -> tuple[Any, Any]:
    """``ilqr``'s compiled pieces, kept between calls (`SystemCache`, weak on the system): ``start(context,
    u, lo, hi, reference) -> (xs, cost)`` and ``solve(context, xs, u, cost, mu, lo, hi, reference, tolerance,
    max_iterations=...)``, the iterations in one compiled loop.
    The context (initial state, parameters), the inputs, their bounds and the reference are arguments:
    a repeated solve from a new state or with new bounds reuses the compiled programs; new cost
    functions, a new horizon or number of intervals compile anew."""
    key = (h, hashable_key(integrator), substeps, hashable_key(running_cost), hashable_key(final_cost), with_reference)

    def build(ref: Any) -> tuple[Any, Any]:
        def pieces(context: Context, lo: Array, hi: Array, reference: Any) -> tuple[Any, Any, Any]:
            F = discrete_dynamics(deref(ref), context, h, integrator, substeps)
            rc, fc = _costs(running_cost, final_cost, reference if with_reference else None, "ilqr")
            return _ilqr_functions(F, rc, fc, h, lo, hi)

        @jax.jit
        def start(context: Context, u: Array, lo: Array, hi: Array, reference: Any) -> tuple[Array, Array]:
            rollout, total_cost, _ = pieces(context, lo, hi, reference)
            xs = rollout(context.get_continuous_state_vector(), u)
            return xs, total_cost(xs, u)

        def solve(
            context: Context,
            xs: Array,
            u: Array,
            cost: Array,
            mu: Array,
            lo: Array,
            hi: Array,
            reference: Any,
            tolerance: Array,
            max_iterations: int,
        ) -> Any:
            """The iterations with ``ilqr``'s stopping rules, in one compiled loop (no host round trip
            per iteration). Returns (xs, u, mu, K, kff, history (padded), its length, iterations,
            converged)."""
            _, _, it = pieces(context, lo, hi, reference)
            x0 = context.get_continuous_state_vector()
            N, m, n = u.shape[0], u.shape[1], x0.shape[0]
            hist = jnp.full((max_iterations + 1,), jnp.nan, cost.dtype).at[0].set(cost)
            tiny = jnp.finfo(cost.dtype).tiny
            zero = jnp.zeros((), jnp.int32)
            init: tuple[Any, ...] = (zero, xs, u, cost, mu, jnp.zeros((N, m, n), xs.dtype), jnp.zeros((N, m), xs.dtype))
            init += (hist, jnp.ones((), jnp.int32), zero, jnp.array(False))

            def cond(c: Any) -> Array:
                return ~c[10] & (c[0] < max_iterations)

            def body(c: Any) -> Any:
                k, xs, u, cost, mu, _, _, hist, nh, rejected, _ = c
                xs, u, new_cost, mu, accept, K, kff, alpha, predicted = it(x0, xs, u, cost, mu)
                last = hist[nh - 1]
                scale = jnp.maximum(jnp.abs(last), tiny)
                # the local model predicts no further decrease: a (box-constrained) stationary point
                stationary = predicted <= tolerance * scale
                # (a tiny decrease from a short line-search step only says the local model is poor here)
                small = accept & ((last - new_cost) / scale < tolerance) & (alpha == 1.0)
                rejected = jnp.where(accept, 0, rejected + 1)
                # no step lowers the cost at any regularization: a local minimum to the resolution here
                stuck = ~accept & ((mu >= 1e12) | (rejected > 20))
                hist = jnp.where(accept, hist.at[nh].set(new_cost), hist)
                nh = nh + accept.astype(jnp.int32)
                cost = jnp.where(accept, new_cost, cost)
                return k + 1, xs, u, cost, mu, K, kff, hist, nh, rejected, stationary | small | stuck

            k, xs, u, _, mu, K, kff, hist, nh, _, done = jax.lax.while_loop(cond, body, init)
            return xs, u, mu, K, kff, hist, nh, k, done

        return start, jax.jit(solve, static_argnames=("max_iterations",))

    return _ILQR_CACHE.get(system, key, build)


def ilqr(
    system: System,
    context: Context,
    T: float,
    num_steps: int,
    running_cost: Callable[..., Array],
    final_cost: Callable[..., Array],
    u_init: Any = None,
    u_lower: Any = None,
    u_upper: Any = None,
    integrator: IntegratorBase | None = None,
    substeps: int = 1,
    max_iterations: int = 200,
    tolerance: float = 1e-9,
    regularization: float = 1e-6,
    reference: Any = None,
) -> ILQRResult:
    """Iterative LQR from the state in ``context`` over ``num_steps`` intervals of ``T / num_steps``
    (see the module docstring).

    **Arguments:**
    - `running_cost(x, u) -> scalar` (integrated: multiplied by h), `final_cost(x) -> scalar`; or
      `running_cost(x, u, k)` with the knot index `k` (0..N-1, time `k T / N` from the start).
    - `reference`: a pytree given to the costs as `running_cost(x, u, k, reference)` and
      `final_cost(x, reference)` (e.g. states to track, shape (N + 1, n), indexed with `k`).
    - `u_init`: initial inputs, (N, m) or broadcastable (default zeros); `u_lower`, `u_upper`: input
      bounds (clipped in the forward pass).
    - `integrator`, `substeps`: the discretization (default RK4, one step per interval).
    - `max_iterations`, `tolerance` (relative cost decrease that ends the iterations),
      `regularization` (initial mu).

    **Precision.** In float32 the relative cost decrease cannot be resolved below ~1e-7: with a
    ``tolerance`` under that (the default 1e-9 is meant for float64) the iterations end when no step
    lowers the cost any more, i.e. at float32's resolution of the cost.

    Returns an [`ILQRResult`][jaxsys.ILQRResult]; a warning names the options when it did not converge.
    """
    system.validate_context(context)
    N = int(num_steps)
    if N < 1 or not float(T) > 0:
        raise JaxsysError(f"ilqr: need num_steps >= 1 and T > 0; got num_steps={num_steps}, T={T}.")
    h = float(T) / N
    x0 = context.get_continuous_state_vector()
    dtype = x0.dtype
    m = _control_port(system, "discrete_dynamics").size()
    u = jnp.zeros((N, m), dtype) if u_init is None else jnp.broadcast_to(jnp.asarray(u_init, dtype), (N, m))
    lo, hi = _input_box(u_lower, u_upper, m, dtype)
    if bool(jnp.any(lo > hi)):
        raise JaxsysError(f"ilqr: u_lower {np.asarray(lo)} is above u_upper {np.asarray(hi)}.")
    u = jnp.clip(u, lo, hi)

    rc, fc = _costs(running_cost, final_cost, reference, "ilqr")  # (checks the costs' signatures)
    start, solve = _ilqr_program(system, h, integrator, substeps, running_cost, final_cost, reference is not None)
    xs, cost = start(context, u, lo, hi, reference)
    if not bool(jnp.isfinite(cost)):
        raise JaxsysError("ilqr: the cost of the initial inputs is not finite; check u_init and the costs.")
    mu = jnp.asarray(regularization, dtype)
    xs, u, mu, K, kff, hist, nh, it, done = solve(
        context, xs, u, cost, mu, lo, hi, reference, jnp.asarray(tolerance, dtype), max_iterations=int(max_iterations)
    )
    history = [float(c) for c in np.asarray(hist)[: int(nh)]]
    it, converged = int(it), bool(done)
    success = converged and bool(np.isfinite(history[-1]))
    stationary_start = False
    if converged and it == 1 and (len(history) == 1 or history[-1] >= history[0]):
        # No step was taken: the initial inputs are a stationary point of the cost (its gradient with
        # respect to u is zero), and iLQR's model cannot tell a minimum from a maximum or saddle there
        # (a pendulum hanging under a swing-up cost). Look for negative curvature of the total cost:
        # Hessian-vector products along a constant push, a ramp, random directions, and a few power
        # iterations (the dominant eigendirection), over the inputs not at a bound.
        free = ((u > lo) & (u < hi)).astype(dtype)
        F = discrete_dynamics(system, context, h, integrator, substeps)
        rollout, total_cost, _ = _ilqr_functions(F, rc, fc, h, lo, hi)

        def total(v: Array) -> Array:
            return total_cost(rollout(x0, v), v)

        def curvature(d: Array) -> tuple[Array, Array]:
            d = d * free
            d = d / jnp.maximum(jnp.linalg.norm(d), jnp.finfo(dtype).tiny)
            hd = jax.jvp(jax.grad(total), (u,), (d,))[1] * free
            return jnp.vdot(d, hd), hd

        curvature = jax.jit(curvature)
        keys = jax.random.split(jax.random.PRNGKey(0), 2)
        trials = [jnp.ones_like(u), jnp.linspace(-1.0, 1.0, N, dtype=dtype)[:, None] * jnp.ones_like(u)]
        trials += [jax.random.normal(k, u.shape, dtype) for k in keys]
        lowest = min(float(curvature(d)[0]) for d in trials)
        d = jnp.ones_like(u)
        for _ in range(8):
            c, d = curvature(d)
            lowest = min(lowest, float(c))
        stationary_start = lowest < -1e-6 * (1.0 + abs(history[0]))
        if stationary_start:
            success = False
    if stationary_start:
        warnings.warn(
            f"ilqr: the initial inputs are a stationary point of the cost that is not a minimum: iLQR took no "
            f"step (cost {history[0]:.6g}; the cost curves down along some change of u). This happens at "
            f"symmetric starts, e.g. a pendulum hanging at rest under a swing-up cost with u_init = 0. Perturb "
            f"u_init (any small nonzero inputs). result.success is False.",
            stacklevel=2,
        )
    elif not success:
        warnings.warn(
            f"ilqr: did not converge in {max_iterations} iterations (cost {history[-1]:.6g}, last relative "
            f"decrease above tolerance {tolerance:g}). Options: max_iterations, tolerance, regularization, "
            f"u_init (a better initial guess), num_steps. result.success is False.",
            stacklevel=2,
        )
    return ILQRResult(
        np.linspace(0.0, float(T), N + 1),
        np.asarray(xs),
        np.asarray(u),
        history[-1],
        np.asarray(history),
        it,
        converged,
        success,
        np.asarray(K),
        np.asarray(kff),
        float(mu),
        stationary_start,
    )


__all__ = ["ILQRResult", "discrete_dynamics", "ilqr", "ilqr_solve"]
