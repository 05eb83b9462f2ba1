"""Dense nonlinear programming for trajectory optimization and other small constrained problems:
minimize ``objective(z)`` subject to ``equality(z) = 0``, ``inequality(z) <= 0`` and bounds
``lower <= z <= upper``, for ``z`` any pytree of arrays.

Two solvers:

* ``"slsqp"`` (the default): SciPy's sequential least-squares quadratic programming (Kraft's SLSQP),
  a dense SQP method with quasi-Newton Hessians, driven by jit-compiled JAX values, gradients and
  constraint Jacobians (``jax.jacfwd``). Robust on swing-up problems of a few thousand variables.
  The iteration loop runs on the host (not inside ``jit``).
* ``"augmented_lagrangian"``: a pure-JAX Powell-Hestenes-Rockafellar augmented Lagrangian whose inner
  problems are solved by L-BFGS (optax). Slower to converge on hard nonconvex problems (the acrobot
  swing-up needs many more iterations than SLSQP), but needs no SciPy and every inner solve is one
  compiled ``while_loop``.

Imports (within jaxsys): the framework's ``errors``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..framework.errors import JaxsysError


def _default_tolerance(dtype: Any) -> float:
    return 1e-6 if jnp.dtype(dtype) == jnp.float64 else 1e-4


def _lbfgs_inner(fun: Callable[[jax.Array], jax.Array], max_iterations: int, gtol: jax.Array) -> Callable:
    """L-BFGS (optax, with its zoom line search) until ||g||_inf <= gtol or ``max_iterations``."""
    opt = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(fun)

    def run(z: jax.Array) -> tuple[jax.Array, jax.Array]:
        def cond(carry: tuple) -> jax.Array:
            z, state, it = carry
            g = optax.tree.get(state, "grad")
            return (it < max_iterations) & ((it == 0) | (jnp.max(jnp.abs(g)) > gtol))

        def body(carry: tuple) -> tuple:
            z, state, it = carry
            value, grad = value_and_grad(z, state=state)
            updates, state = opt.update(grad, state, z, value=value, grad=grad, value_fn=fun)
            return optax.apply_updates(z, updates), state, it + 1

        z, _, it = jax.lax.while_loop(cond, body, (z, opt.init(z), 0))
        return z, it

    return run


def _flat_bounds(bound: Any, z0: Any, fill: float) -> np.ndarray:
    """A bound pytree (None, a scalar, or a pytree like z0 whose leaves broadcast) flattened like z0."""
    flat0, _ = jax.flatten_util.ravel_pytree(z0)
    if bound is None:
        return np.full(flat0.shape, fill)
    leaves0, tree0 = jax.tree_util.tree_flatten(z0)
    if not isinstance(bound, dict) and np.ndim(bound) == 0 and not isinstance(z0, (int, float)):
        return np.full(flat0.shape, float(bound))
    leaves = tree0.flatten_up_to(bound)
    parts = [
        np.broadcast_to(np.full(np.shape(x0), fill) if b is None else np.asarray(b, float), np.shape(x0)).ravel()
        for b, x0 in zip(leaves, leaves0)
    ]
    return np.concatenate(parts) if parts else np.zeros((0,))


class _Problem:
    """The problem on the flat vector z (``jax.flatten_util.ravel_pytree`` of z0), with the bounds as
    flat arrays and the constraints as flat vectors."""

    def __init__(
        self,
        objective: Callable[[Any], jax.Array],
        z0: Any,
        equality: Callable[[Any], jax.Array] | None,
        inequality: Callable[[Any], jax.Array] | None,
        lower: Any,
        upper: Any,
    ) -> None:
        self.flat0, self.unravel = jax.flatten_util.ravel_pytree(z0)
        self.dtype = self.flat0.dtype
        empty = jnp.zeros((0,), self.dtype)
        unravel = self.unravel
        self.objective = lambda z: objective(unravel(z))
        self.eq = (lambda z: jnp.ravel(equality(unravel(z)))) if equality is not None else (lambda z: empty)
        self.ineq = (lambda z: jnp.ravel(inequality(unravel(z)))) if inequality is not None else (lambda z: empty)
        self.lower = _flat_bounds(lower, z0, -np.inf)
        self.upper = _flat_bounds(upper, z0, np.inf)
        if np.any(self.lower > self.upper):
            k = int(np.argmax(self.lower > self.upper))
            raise JaxsysError(
                f"A lower bound is above its upper bound (flat variable {k}: {self.lower[k]} > {self.upper[k]})."
            )
        self.lo_idx = np.flatnonzero(np.isfinite(self.lower))
        self.hi_idx = np.flatnonzero(np.isfinite(self.upper))

    def bound_constraints(self, z: jax.Array) -> jax.Array:
        """The finite bounds as ``g(z) <= 0``."""
        lo = jnp.asarray(self.lower[self.lo_idx], self.dtype) - z[self.lo_idx]
        hi = z[self.hi_idx] - jnp.asarray(self.upper[self.hi_idx], self.dtype)
        return jnp.concatenate([lo, hi])

    def violation(self, z: jax.Array) -> jax.Array:
        parts = [
            jnp.abs(self.eq(z)),
            jnp.maximum(self.ineq(z), 0.0),
            jnp.maximum(self.bound_constraints(z), 0.0),
            jnp.zeros((1,), self.dtype),
        ]
        return jnp.max(jnp.concatenate(parts))


def augmented_lagrangian(
    objective: Callable[[Any], jax.Array],
    z0: Any,
    equality: Callable[[Any], jax.Array] | None = None,
    inequality: Callable[[Any], jax.Array] | None = None,
    lower: Any = None,
    upper: Any = None,
    outer_iterations: int = 50,
    inner_iterations: int | None = None,
    penalty: float = 100.0,
    penalty_growth: float = 10.0,
    max_penalty: float | None = None,
    tolerance: float | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Minimize ``objective(z)`` s.t. ``equality(z) = 0``, ``inequality(z) <= 0`` and
    ``lower <= z <= upper`` by the Powell-Hestenes-Rockafellar augmented Lagrangian (``z`` any pytree
    of arrays; bounds None, scalars or pytrees like ``z0`` with ``inf`` for unbounded entries).

    Each inner problem (the augmented Lagrangian for fixed multipliers and penalty) is minimized to
    a stationarity tolerance that tightens as the penalty grows; then the multipliers are updated, and
    the penalty multiplied by ``penalty_growth`` when the violation did not fall below a quarter of its
    previous value.

    Args:
        outer_iterations: most multiplier updates (default 50).
        inner_iterations: most L-BFGS iterations per inner problem (default 1000).
        penalty: the initial penalty weight; ``max_penalty`` caps it (default 1e8 in float64, 1e4 in
            float32, whose Hessians a larger weight makes too ill-conditioned).
        tolerance: success when the largest violation (|equality|, positive parts of inequalities and
            bounds) is at most this (default 1e-6 in float64, 1e-4 in float32).

    Returns:
        (z, info), info = {"violation", "objective", "iterations" (outer), "inner_iterations" (total),
        "converged", "message", "tolerance", "options"}.
    """
    prob = _Problem(objective, z0, equality, inequality, lower, upper)
    dtype = prob.dtype
    flat0 = prob.flat0
    tolerance = _default_tolerance(dtype) if tolerance is None else float(tolerance)
    if max_penalty is None:
        max_penalty = 1e8 if dtype == jnp.float64 else 1e4
    if inner_iterations is None:
        inner_iterations = 1000
    ineq = lambda z: jnp.concatenate([prob.ineq(z), prob.bound_constraints(z)])  # noqa: E731
    n_eq, n_in = prob.eq(flat0).shape[0], ineq(flat0).shape[0]
    # stationarity of the inner problems, relative to the objective's scale
    gtol_final = float(jnp.sqrt(jnp.finfo(dtype).eps)) * (1e-1 if dtype == jnp.float64 else 1.0)

    def lagrangian(z: jax.Array, lam: jax.Array, nu: jax.Array, mu: jax.Array) -> jax.Array:
        c = prob.eq(z)
        g = ineq(z)
        value = prob.objective(z) + lam @ c + 0.5 * mu * c @ c
        shifted = jnp.maximum(0.0, nu + mu * g)
        return value + (shifted @ shifted - nu @ nu) / (2.0 * mu)

    @jax.jit
    def inner(z: jax.Array, lam: jax.Array, nu: jax.Array, mu: jax.Array) -> tuple[jax.Array, ...]:
        fun = lambda zz: lagrangian(zz, lam, nu, mu)  # noqa: E731
        # loose in the first outer iterations (a rough minimizer is enough while the multipliers are
        # far off), down to the final stationarity as the penalty grows (LANCELOT's schedule)
        gtol = jnp.maximum(gtol_final, jnp.minimum(1e-1, 1.0 / mu)) * jnp.maximum(1.0, jnp.abs(fun(z)))
        z, it = _lbfgs_inner(fun, inner_iterations, gtol)(z)
        return z, it, prob.violation(z), prob.eq(z), ineq(z), prob.objective(z)

    z = flat0
    lam = jnp.zeros((n_eq,), dtype)
    nu = jnp.zeros((n_in,), dtype)
    mu = float(penalty)
    used, inner_total, previous = 0, 0, np.inf
    violation, value = np.inf, np.nan
    for used in range(1, int(outer_iterations) + 1):  # noqa: B007 - the count is reported
        z, it, v, c, g, value = inner(z, lam, nu, jnp.asarray(mu, dtype))
        inner_total += int(it)
        violation = float(v)
        if violation <= tolerance or not np.isfinite(violation):
            break
        lam = lam + mu * c
        nu = jnp.maximum(0.0, nu + mu * g)
        if violation > 0.25 * previous:
            mu = min(mu * penalty_growth, max_penalty)
        previous = violation
    converged = bool(np.isfinite(violation) and np.isfinite(float(value)) and violation <= tolerance)
    return prob.unravel(z), {
        "violation": violation,
        "objective": float(value),
        "iterations": used,
        "inner_iterations": inner_total,
        "converged": converged,
        "message": "constraints met" if converged else f"violation {violation:.3g} after {used} outer iterations",
        "tolerance": tolerance,
        "options": {
            "outer_iterations": outer_iterations,
            "inner_iterations": inner_iterations,
            "penalty": penalty,
        },
    }


def slsqp(
    objective: Callable[[Any], jax.Array],
    z0: Any,
    equality: Callable[[Any], jax.Array] | None = None,
    inequality: Callable[[Any], jax.Array] | None = None,
    lower: Any = None,
    upper: Any = None,
    max_iterations: int = 1000,
    tolerance: float | None = None,
    ftol: float | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Minimize ``objective(z)`` s.t. ``equality(z) = 0``, ``inequality(z) <= 0`` and
    ``lower <= z <= upper`` with SciPy's SLSQP, given jit-compiled values, gradients and constraint
    Jacobians (``jax.jacfwd``). Arguments as [`augmented_lagrangian`][jaxsys.augmented_lagrangian];
    ``max_iterations`` SQP
    iterations, ``ftol`` SLSQP's objective tolerance (default 1e-10 in float64, 1e-5 in float32:
    float32 gradients are too noisy for a tighter one).

    Returns (z, info) with info as [`augmented_lagrangian`][jaxsys.augmented_lagrangian]'s ("iterations" are SQP
    iterations;
    "converged": SLSQP reported convergence and the violation is within ``tolerance``).
    """
    try:
        import scipy.optimize
    except ImportError as err:  # pragma: no cover - scipy is a dependency
        raise JaxsysError("solver='slsqp' needs SciPy; or use solver='augmented_lagrangian'.") from err
    prob = _Problem(objective, z0, equality, inequality, lower, upper)
    dtype = prob.dtype
    tolerance = _default_tolerance(dtype) if tolerance is None else float(tolerance)
    if ftol is None:
        ftol = 1e-10 if dtype == jnp.float64 else 1e-5

    def host(fn: Callable) -> Callable:
        compiled = jax.jit(fn)
        return lambda z: np.asarray(compiled(jnp.asarray(z, dtype)), np.float64)

    value_and_grad = jax.jit(jax.value_and_grad(prob.objective))

    def fun(z: np.ndarray) -> tuple[float, np.ndarray]:
        f, g = value_and_grad(jnp.asarray(z, dtype))
        return float(f), np.asarray(g, np.float64)

    constraints = []
    if prob.eq(prob.flat0).shape[0]:
        constraints.append({"type": "eq", "fun": host(prob.eq), "jac": host(jax.jacfwd(prob.eq))})
    if prob.ineq(prob.flat0).shape[0]:
        neg = lambda z: -prob.ineq(z)  # noqa: E731 - SciPy's inequalities are fun(z) >= 0
        constraints.append({"type": "ineq", "fun": host(neg), "jac": host(jax.jacfwd(neg))})
    bounds = scipy.optimize.Bounds(prob.lower, prob.upper) if (prob.lo_idx.size or prob.hi_idx.size) else None
    z_start = np.clip(np.asarray(prob.flat0, np.float64), prob.lower, prob.upper)
    result = scipy.optimize.minimize(
        fun,
        z_start,
        jac=True,
        method="SLSQP",
        bounds=bounds,
        constraints=constraints,
        options={"maxiter": int(max_iterations), "ftol": float(ftol)},
    )
    z = jnp.asarray(result.x, dtype)
    violation = float(prob.violation(z))
    value = float(prob.objective(z))
    converged = bool(result.success and np.isfinite(value) and violation <= tolerance)
    return prob.unravel(z), {
        "violation": violation,
        "objective": value,
        "iterations": int(result.nit),
        "inner_iterations": int(result.nit),
        "converged": converged,
        "message": f"SLSQP: {result.message}",
        "tolerance": tolerance,
        "options": {"max_iterations": max_iterations, "ftol": ftol},
    }


SOLVERS = {"slsqp": slsqp, "augmented_lagrangian": augmented_lagrangian}


def solve_nlp(
    objective: Callable[[Any], jax.Array],
    z0: Any,
    equality: Callable[[Any], jax.Array] | None = None,
    inequality: Callable[[Any], jax.Array] | None = None,
    lower: Any = None,
    upper: Any = None,
    solver: str = "slsqp",
    **options: Any,
) -> tuple[Any, dict[str, Any]]:
    """Minimize ``objective(z)`` s.t. ``equality(z) = 0``, ``inequality(z) <= 0``, ``lower <= z <= upper``
    with ``solver`` (``"slsqp"`` or ``"augmented_lagrangian"``) and its ``options`` (see
    [`slsqp`][jaxsys.slsqp] and [`augmented_lagrangian`][jaxsys.augmented_lagrangian]). Returns (z, info)."""
    if solver not in SOLVERS:
        raise JaxsysError(f"solver must be one of {sorted(SOLVERS)}, not {solver!r}.")
    fn = SOLVERS[solver]
    import inspect

    allowed = set(inspect.signature(fn).parameters) - {"objective", "z0", "equality", "inequality", "lower", "upper"}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise JaxsysError(f"Unknown option(s) {unknown} for solver={solver!r}; its options are {sorted(allowed)}.")
    z, info = fn(objective, z0, equality, inequality, lower, upper, **options)
    info["solver"] = solver
    return z, info
