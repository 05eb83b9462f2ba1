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
import jax.flatten_util
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

    def run(z: jax.Array) -> tuple[jax.Array, Any]:
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
    tree0_: Any = tree0
    if not isinstance(bound, dict) and np.ndim(bound) == 0 and not isinstance(z0, (int, float)):
        return np.full(flat0.shape, float(bound))
    leaves = tree0_.flatten_up_to(bound)
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


class SparseJacobian:
    """The Jacobian of ``fn: R^n -> R^m`` as the values of its nonzeros, evaluated with one forward-mode
    directional derivative per *color* (Curtis-Powell-Reid: columns that share no row are seeded
    together), so its cost grows with the number of colors (a few tens for trajectory optimization,
    whatever the number of knots), not with n.

    The sparsity pattern is detected once from dense Jacobians at ``z0`` and two random points near it
    (entries exactly zero at all three are taken as structural zeros: a Jacobian entry that vanishes at
    all three points by coincidence would be lost, and with it a little of Newton's accuracy, never the
    constraint itself). Attributes: ``rows``, ``cols`` (int arrays of the nonzeros), ``num_colors``;
    ``values(z)`` (jit-compiled) returns the nonzeros in that order."""

    def __init__(self, fn: Callable[[jax.Array], jax.Array], z0: jax.Array) -> None:
        n = z0.shape[0]
        dense = jax.jit(jax.jacfwd(fn))
        key = jax.random.PRNGKey(0)
        scale = 1e-2 * (1.0 + jnp.abs(z0))
        points = [z0] + [z0 + scale * jax.random.normal(k, z0.shape, z0.dtype) for k in jax.random.split(key, 2)]
        pattern = np.zeros((0, n), bool)
        for z in points:
            J = np.asarray(dense(z))
            pattern = (J != 0) if pattern.size == 0 else (pattern | (J != 0))
        m = pattern.shape[0] if pattern.ndim == 2 else 0
        rows: Any
        cols: Any
        rows, cols = np.nonzero(pattern) if m else (np.zeros(0, int), np.zeros(0, int))
        self.rows, self.cols = rows, cols
        colors = _greedy_column_coloring(pattern, n) if m else np.zeros(n, int)
        self.num_colors = int(colors.max()) + 1 if n else 0
        self.shape = (m, n)
        seeds = jnp.asarray(np.eye(max(self.num_colors, 1))[colors].T[: max(self.num_colors, 1)], z0.dtype)
        rows, col_colors = jnp.asarray(self.rows), jnp.asarray(colors[self.cols])

        def values(z: jax.Array) -> jax.Array:
            compressed = jax.vmap(lambda s: jax.jvp(fn, (z,), (s,))[1])(seeds)  # (colors, m)
            return compressed[col_colors, rows]

        self.values = jax.jit(values)


def _greedy_column_coloring(pattern: np.ndarray, n: int) -> np.ndarray:
    """Colors of the columns of the boolean ``pattern`` (m x n) such that two columns with a nonzero in
    the same row differ (largest-first greedy)."""
    rows_of = [np.flatnonzero(pattern[:, j]) for j in range(n)]
    cols_of = [np.flatnonzero(pattern[i]) for i in range(pattern.shape[0])]
    colors = np.full(n, -1)
    for j in sorted(range(n), key=lambda j: -len(rows_of[j])):
        taken = {colors[k] for i in rows_of[j] for k in cols_of[i] if colors[k] >= 0}
        c = 0
        while c in taken:
            c += 1
        colors[j] = c
    return colors


def ipopt(
    objective: Callable[[Any], jax.Array],
    z0: Any,
    equality: Callable[[Any], jax.Array] | None = None,
    inequality: Callable[[Any], jax.Array] | None = None,
    lower: Any = None,
    upper: Any = None,
    max_iterations: int = 3000,
    tolerance: float | None = None,
    print_level: int = 0,
    ipopt_options: dict[str, Any] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Minimize ``objective(z)`` s.t. ``equality(z) = 0``, ``inequality(z) <= 0`` and
    ``lower <= z <= upper`` with IPOPT (an interior-point method with sparse linear algebra, through
    ``cyipopt``: ``pip install cyipopt-wheels``, which bundles IPOPT, or ``pip install "jaxsys[ipopt]"``).

    The constraint Jacobian is sparse (`SparseJacobian`: pattern detected once, values by one
    forward-mode derivative per column color), the Hessian IPOPT's limited-memory quasi-Newton: the work
    of an iteration grows linearly with the size of a trajectory optimization problem, where SLSQP's
    dense QP grows with its cube. Arguments as [`augmented_lagrangian`][jaxsys.augmented_lagrangian];
    ``max_iterations`` IPOPT iterations, ``tolerance`` also IPOPT's ``constr_viol_tol``,
    ``print_level`` IPOPT's (0 silent, 5 its usual log), ``ipopt_options`` any other IPOPT options by name.

    Returns (z, info) with info as [`augmented_lagrangian`][jaxsys.augmented_lagrangian]'s (plus
    "jacobian_colors": the derivatives an iteration takes for the Jacobian).
    """
    try:
        import cyipopt
    except ImportError as err:
        raise JaxsysError(
            "solver='ipopt' needs cyipopt: pip install cyipopt-wheels (it bundles IPOPT; Linux x86-64), or "
            "pip install 'jaxsys[ipopt]'. Or use solver='slsqp' (SciPy) or 'augmented_lagrangian' (pure JAX)."
        ) from err
    prob = _Problem(objective, z0, equality, inequality, lower, upper)
    dtype = prob.dtype
    tolerance = _default_tolerance(dtype) if tolerance is None else float(tolerance)
    n_eq, n_in = prob.eq(prob.flat0).shape[0], prob.ineq(prob.flat0).shape[0]

    def constraints(z: jax.Array) -> jax.Array:
        return jnp.concatenate([prob.eq(z), prob.ineq(z)])

    z_start = jnp.asarray(np.clip(np.asarray(prob.flat0, np.float64), prob.lower, prob.upper), dtype)
    jac = SparseJacobian(constraints, z_start)
    value_and_grad = jax.jit(jax.value_and_grad(prob.objective))
    cons = jax.jit(constraints)
    f64 = np.float64
    iterations = [0]

    class _Callbacks:
        def objective(self, z: np.ndarray) -> float:
            return float(value_and_grad(jnp.asarray(z, dtype))[0])

        def gradient(self, z: np.ndarray) -> np.ndarray:
            return np.asarray(value_and_grad(jnp.asarray(z, dtype))[1], f64)

        def constraints(self, z: np.ndarray) -> np.ndarray:
            return np.asarray(cons(jnp.asarray(z, dtype)), f64)

        def jacobian(self, z: np.ndarray) -> np.ndarray:
            return np.asarray(jac.values(jnp.asarray(z, dtype)), f64)

        def jacobianstructure(self) -> tuple[np.ndarray, np.ndarray]:
            return jac.rows, jac.cols

        def intermediate(self, alg_mod: int, iter_count: int, *args: Any) -> bool:
            iterations[0] = int(iter_count)
            return True

    big = 1e20  # IPOPT's infinity
    lb = np.where(np.isfinite(prob.lower), prob.lower, -big)
    ub = np.where(np.isfinite(prob.upper), prob.upper, big)
    cl = np.concatenate([np.zeros(n_eq), np.full(n_in, -big)])
    cu = np.zeros(n_eq + n_in)
    nlp = cyipopt.Problem(n=lb.shape[0], m=n_eq + n_in, problem_obj=_Callbacks(), lb=lb, ub=ub, cl=cl, cu=cu)
    options = {
        "hessian_approximation": "limited-memory",
        "max_iter": int(max_iterations),
        "constr_viol_tol": tolerance,
        "print_level": int(print_level),
        "sb": "yes",
    }
    options.update(ipopt_options or {})
    for name, value in options.items():
        nlp.add_option(name, value)
    x, result = nlp.solve(np.asarray(z_start, f64))
    # (IPOPT relaxes bounds by ~1e-8 relative while it iterates: the answer is put back inside them)
    z = jnp.asarray(np.clip(x, prob.lower, prob.upper), dtype)
    violation = float(prob.violation(z))
    value = float(prob.objective(z))
    status = int(result["status"])
    n_iterations = iterations[0]
    converged = bool(status in (0, 1) and np.isfinite(value) and violation <= tolerance)
    message = result["status_msg"]
    message = message.decode() if isinstance(message, bytes) else str(message)
    return prob.unravel(z), {
        "violation": violation,
        "objective": value,
        "iterations": n_iterations,
        "inner_iterations": n_iterations,
        "converged": converged,
        "message": f"IPOPT: {message}",
        "tolerance": tolerance,
        "jacobian_colors": jac.num_colors,
        "options": options,
    }


SOLVERS: dict[str, Callable[..., Any]] = {"slsqp": slsqp, "augmented_lagrangian": augmented_lagrangian, "ipopt": ipopt}


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
    with ``solver`` (``"slsqp"``, ``"augmented_lagrangian"`` or ``"ipopt"``) and its ``options`` (see
    [`slsqp`][jaxsys.slsqp], [`augmented_lagrangian`][jaxsys.augmented_lagrangian] and
    [`ipopt`][jaxsys.ipopt]). Returns (z, info)."""
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


__all__ = ["SparseJacobian", "augmented_lagrangian", "ipopt", "slsqp", "solve_nlp"]
