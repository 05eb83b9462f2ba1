"""Fitting numeric parameters of a system to measured trajectories.

``fit_parameters`` minimizes the mean squared error between what ``simulate`` records at the
measurement times and the measurements, over one or several experiments (batched with ``vmap``):

* ``method="adam"`` (default): an optax optimizer on ``jax.value_and_grad`` of the loss, run in
  chunks of steps, each chunk one compiled ``lax.scan`` (no Python round trip per step), the compiled
  program cached across calls with the same system, parameters, times and options (a second fit on
  new data or from new initial values does not recompile);
* ``method="levenberg_marquardt"`` / ``"gauss_newton"``: on the residual vector, with its Jacobian by
  ``jax.jacfwd``; these also give the parameters' covariance (``s^2 (J^T J)^-1`` with
  ``s^2 = |r|^2 / (m - p)``) and standard errors.

Bounds and positivity are handled by a change of variables (sigmoid onto [lo, hi], softplus onto
(0, inf)), so the optimizers are unconstrained; covariances are given for the parameters themselves.

Imports (within jaxsys): the framework; ``analysis`` (``integrators``, ``simulate``,
``compile_cache``).
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..analysis.compile_cache import SystemCache, deref, hashable_key
from ..analysis.integrators import IntegratorBase, RungeKutta4Integrator
from ..analysis.simulate import PrecisionWarning, simulate
from ..framework.context import Context
from ..framework.errors import JaxsysError
from ..framework.system import System


@dataclasses.dataclass(frozen=True)
class FitParameter:
    """One fitted scalar: entry ``element`` of numeric parameter group ``group`` (of the context),
    optionally bounded to [lower, upper] (either may be None) or positive."""

    group: int
    element: int = 0
    lower: float | None = None
    upper: float | None = None
    positive: bool = False

    def to_unconstrained(self, value: Any) -> Any:
        value = jnp.asarray(value)
        if self.lower is not None and self.upper is not None:
            s = jnp.clip((value - self.lower) / (self.upper - self.lower), 1e-9, 1 - 1e-9)
            return jnp.log(s) - jnp.log1p(-s)
        if self.positive or self.lower is not None:
            base = self.lower if self.lower is not None else 0.0
            return jnp.log(jnp.expm1(jnp.maximum(value - base, 1e-12)))
        return value

    def from_unconstrained(self, z: Any) -> Any:
        if self.lower is not None and self.upper is not None:
            return self.lower + (self.upper - self.lower) * jax.nn.sigmoid(z)
        if self.positive or self.lower is not None:
            return (self.lower if self.lower is not None else 0.0) + jax.nn.softplus(z)
        return z


@dataclasses.dataclass
class FitResult:
    """The outcome of [`fit_parameters`][jaxsys.fit_parameters].

    **Fields:** `params` (name -> fitted value), `context` (the first experiment's context with the
    fitted parameters), `loss_history`, `final_loss`, `steps`, `seconds`, `method`, `converged`
    (Adam: the loss fell below ``tolerance``; Levenberg-Marquardt / Gauss-Newton: the relative
    decrease of the residual stalled below ``tolerance`` or the step vanished), and for the
    least-squares methods `covariance` (p x p, in the order of `names`), `standard_errors` (name ->
    one standard deviation), `residual_variance` (s^2) and `names`.
    """

    params: dict[str, float]
    context: Context
    loss_history: np.ndarray
    final_loss: float
    steps: int
    seconds: float
    method: str = "adam"
    converged: bool = False
    covariance: np.ndarray | None = None
    standard_errors: dict[str, float] | None = None
    residual_variance: float | None = None
    names: tuple[str, ...] = ()


def set_parameters(context: Context, spec: Mapping[str, FitParameter], values: Mapping[str, Any]) -> Context:
    """``context`` with the named scalar parameters replaced by ``values``."""
    for name, p in spec.items():
        group = context.get_numeric_parameter(p.group)
        context = context.with_numeric_parameter(p.group, group.at[p.element].set(values[name]))
    return context


def trajectory_loss(
    system: System,
    contexts: Context,
    times: Any,
    measurements: Any,
    observe: Callable[[Context], Any] | None = None,
    integrator: IntegratorBase | None = None,
) -> jax.Array:
    """Mean squared error between ``observe`` recorded at ``times`` and ``measurements``, averaged
    over the batch of experiments (``contexts`` with a leading batch axis)."""
    integrator = integrator or RungeKutta4Integrator(max_step_size=0.01)
    observe = observe or (lambda c: c.get_continuous_state_vector())
    # times known here (NumPy, a list, a concrete array) stay NumPy, so that inside a jitted loss they
    # are still known: the fixed-step plan is static and t_final a number
    known = not isinstance(times, jax.core.Tracer)
    times = np.asarray(times, dtype=float) if known else times
    t_final = float(np.max(times)) if known else jnp.max(times)

    def one(ctx: Context, ts: Any, ys: Any) -> jax.Array:
        r = simulate(system, ctx, t_final, integrator, save_at=ts, record=observe)
        return jnp.mean((r.ys - ys) ** 2)

    n_exp = int(jnp.shape(measurements)[0])
    if n_exp == 1:  # one experiment: no batch axis to map over (compiles faster than a vmap of one)
        ctx = jax.tree_util.tree_map(lambda a: a[0], contexts)
        ts = times if np.ndim(times) == 1 else jnp.asarray(times)[0]
        return one(ctx, ts, measurements[0])
    if np.ndim(times) == 1:  # the same measurement times for every experiment (fast: a static plan)
        return jnp.mean(jax.vmap(lambda c, y: one(c, times, y))(contexts, measurements))
    return jnp.mean(jax.vmap(one)(contexts, jnp.asarray(times), measurements))


def _check_fit_parameters(context: Context, params: Mapping[str, FitParameter], initial: Any) -> None:
    """Every FitParameter names an existing numeric parameter entry; initial values name fitted ones."""
    if not params:
        raise JaxsysError("fit_parameters: params is empty: name at least one FitParameter to fit.")
    groups = context.num_numeric_parameter_groups()
    for name, p in params.items():
        if not isinstance(p, FitParameter):
            raise JaxsysError(f"fit_parameters: params[{name!r}] must be a FitParameter; got {type(p).__name__}.")
        if not 0 <= p.group < groups:
            raise JaxsysError(
                f"fit_parameters: params[{name!r}] names numeric parameter group {p.group}; the context has "
                f"{groups} group(s) (0..{groups - 1})."
            )
        size = int(np.shape(context.get_numeric_parameter(p.group))[0])
        if not 0 <= p.element < size:
            raise JaxsysError(
                f"fit_parameters: params[{name!r}] names element {p.element} of numeric parameter group {p.group}, "
                f"which has {size} element(s) (0..{size - 1})."
            )
        if p.lower is not None and p.upper is not None and not p.lower < p.upper:
            raise JaxsysError(f"fit_parameters: params[{name!r}] has lower={p.lower} >= upper={p.upper}.")
    if initial is not None:
        unknown = sorted(set(initial) - set(params))
        if unknown:
            raise JaxsysError(f"fit_parameters: initial names {unknown}, which are not in params {sorted(params)}.")
        missing = sorted(set(params) - set(initial))
        if missing:
            raise JaxsysError(f"fit_parameters: initial has no value for {missing}; give one for every parameter.")


def _check_measurements(system: System, contexts: list[Context], times: Any, measurements: Any, observe: Any) -> None:
    """measurements: (experiments, number of times, *shape of observe(context))."""
    observe = observe or (lambda c: c.get_continuous_state_vector())
    obs = jax.eval_shape(observe, contexts[0])
    obs_shape = tuple(getattr(obs, "shape", ()))
    t_shape = tuple(np.shape(times))
    if len(t_shape) not in (1, 2) or (len(t_shape) == 2 and t_shape[0] != len(contexts)):
        raise JaxsysError(
            f"fit_parameters: times must have shape (n,) (shared by all experiments) or ({len(contexts)}, n) (one "
            f"row per experiment); got {t_shape}."
        )
    expected = (len(contexts), t_shape[-1]) + obs_shape
    if tuple(measurements.shape) != expected:
        raise JaxsysError(
            f"fit_parameters: measurements must have shape (experiments, times, *observation) = {expected} "
            f"({len(contexts)} context(s), {t_shape[-1]} time(s), observe(context) of shape {obs_shape}); got "
            f"{tuple(measurements.shape)}."
        )
    if not isinstance(times, jax.core.Tracer) and not np.all(np.isfinite(np.asarray(times))):
        raise JaxsysError("fit_parameters: times must be finite.")


_FIT_CACHE: SystemCache[Any] = SystemCache("fit_parameters", maxsize=32)
_DEFAULT_ADAM: dict[float, Any] = {}
FIT_CHECK = 25  # with a tolerance, Adam's losses are looked at every this many steps


def _default_optimizer() -> optax.GradientTransformation:
    # (one object, so the cache of compiled fits recognizes it)
    if 0.05 not in _DEFAULT_ADAM:
        _DEFAULT_ADAM[0.05] = optax.adam(0.05)
    return _DEFAULT_ADAM[0.05]


QUANTIZED_ULPS = 100
"""A standard error below this many units of the dtype's resolution of its parameter means the fit is
limited by rounding (`fit_parameters` warns)."""


def _warn_if_quantized(fitted: Mapping[str, float], errors: Mapping[str, float], dtype: Any) -> None:
    """Warn (`PrecisionWarning`) when, in float32 (or another dtype narrower than float64), a standard
    error is within `QUANTIZED_ULPS` of the dtype's resolution of its parameter: the estimate and its
    error are then set by rounding (of the simulated observations, of the residuals), not by the data;
    float32 reaches this at noise ~1e-6 relative."""
    if jnp.dtype(dtype) == jnp.float64:
        return  # (float64's rounding is far below any real noise: a standard error near it is an exact fit)
    eps = float(jnp.finfo(dtype).eps)
    small = [
        n
        for n, v in fitted.items()
        if np.isfinite(errors[n]) and errors[n] < QUANTIZED_ULPS * eps * max(abs(v), float(jnp.finfo(dtype).tiny))
    ]
    if small:
        shown = ", ".join(f"{n} = {fitted[n]:.9g} +/- {errors[n]:.2g}" for n in small)
        which = str(jnp.dtype(dtype))
        warnings.warn(
            f"fit_parameters: the standard errors of {shown} are within {QUANTIZED_ULPS} units of {which}'s "
            f"resolution of the parameter ({eps:.1e} relative): the estimates and their errors are set by rounding "
            f"(of the simulated observations and the residuals), not by the data; they are quantized at that "
            f"level. Fit in float64 (jax.config.update('jax_enable_x64', True) before creating the contexts).",
            PrecisionWarning,
            stacklevel=3,
        )


def fit_parameters(
    system: System,
    contexts: Context | Sequence[Context],
    params: Mapping[str, FitParameter],
    times: Any,
    measurements: Any,
    *,
    initial: Mapping[str, float] | None = None,
    observe: Callable[[Context], Any] | None = None,
    integrator: IntegratorBase | None = None,
    optimizer: optax.GradientTransformation | None = None,
    method: str = "adam",
    steps: int | None = None,
    tolerance: float | None = None,
    print_every: int = 0,
) -> FitResult:
    """Fit scalar numeric parameters of ``system`` to measured trajectories.

    **Arguments:**
    - `contexts`: one context per experiment (initial state, inputs, other parameters), or a list.
    - `params`: name -> [`FitParameter`][jaxsys.FitParameter] (which entry of which numeric parameter, and bounds).
    - `times`: measurement times, shape (n,) shared by all experiments, or (experiments, n) (NumPy or
      JAX arrays, or lists).
    - `measurements`: shape (experiments, n, k): what ``observe(context)`` should be at those times.
    - `initial`: starting values (default: the values in the first context).
    - `observe`: ``context -> (k,)``; default: the continuous state vector.
    - `integrator`: default fixed-step RK4 with h = 0.01 s.
    - `method`: ``"adam"`` (default; any optax ``optimizer``), ``"levenberg_marquardt"`` or
      ``"gauss_newton"`` (least squares on the residuals with ``jax.jacfwd``: few iterations, and the
      parameters' covariance and standard errors in the result).
    - `optimizer`: for ``"adam"``, an optax transformation (default ``optax.adam(0.05)``).
    - `steps`: the most optimizer steps (default 500 for Adam, 50 for the least-squares methods).
    - `tolerance`: Adam stops when the loss is below it (default 0: runs all steps); the
      least-squares methods stop when the residual's relative decrease is below it (default 1e-10).
    - `print_every`: print the loss and parameters every this many steps (0: silent; Adam prints at
      the end of its compiled chunks of steps).

    **Precision.** In float32 (JAX's default) Adam, which minimizes the loss itself, resolves
    parameters only to about the square root of float32's resolution (~3e-4 relative: the loss is flat
    to rounding nearer the minimum); the least-squares methods work on the residuals and do better.
    Standard errors mean something only when the measurement noise is well above float32's rounding of
    the simulated trajectory (~1e-6 relative). Fit in float64 (``jax_enable_x64``) when either matters.
    The simulations inside have the integrator's precision (its **Precision** note).

    Returns a [`FitResult`][jaxsys.FitResult].
    """
    if method not in ("adam", "levenberg_marquardt", "gauss_newton"):
        raise JaxsysError(
            f"fit_parameters: method must be 'adam', 'levenberg_marquardt' or 'gauss_newton'; got {method!r}."
        )
    if isinstance(contexts, Context):
        contexts = [contexts]
    contexts = list(contexts)
    if not contexts:
        raise JaxsysError("fit_parameters: at least one experiment context is needed.")
    for c in contexts:
        system.validate_context(c)
    batch = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *contexts)
    _check_fit_parameters(contexts[0], params, initial)
    times = times if isinstance(times, jax.core.Tracer) else np.asarray(times, dtype=float)
    measurements = jnp.asarray(np.asarray(measurements) if not isinstance(measurements, jax.Array) else measurements)
    _check_measurements(system, contexts, times, measurements, observe)
    start = initial or {n: float(contexts[0].get_numeric_parameter(p.group)[p.element]) for n, p in params.items()}
    dtype = contexts[0].get_time().dtype
    z = {n: jnp.asarray(p.to_unconstrained(float(start[n])), dtype) for n, p in params.items()}
    names = tuple(params)
    times_key = (np.shape(times), np.asarray(times).tobytes()) if not isinstance(times, jax.core.Tracer) else None
    base_key = (
        tuple((n, params[n]) for n in names),
        times_key,
        hashable_key(observe),
        hashable_key(integrator),
        jax.tree_util.tree_structure(batch),
        tuple(measurements.shape),
        str(measurements.dtype),
    )

    def make_loss(ref: Any) -> Callable[..., jax.Array]:
        # (the cached fit reaches the system through a weak reference: a dropped system is freed)
        def loss_of(z: Mapping[str, Any], batch: Context, measurements: Any) -> jax.Array:
            values = {n: p.from_unconstrained(z[n]) for n, p in params.items()}
            ctxs = jax.vmap(lambda c: set_parameters(c, params, values))(batch)
            return trajectory_loss(deref(ref), ctxs, times, measurements, observe, integrator)

        return loss_of

    t0 = time.perf_counter()
    if method == "adam":
        return _fit_adam(
            system,
            base_key,
            make_loss,
            z,
            batch,
            measurements,
            params,
            contexts,
            optimizer or _default_optimizer(),
            500 if steps is None else int(steps),
            0.0 if tolerance is None else float(tolerance),
            print_every,
            t0,
        )
    return _fit_least_squares(
        base_key,
        system,
        params,
        times,
        observe,
        integrator,
        z,
        batch,
        measurements,
        contexts,
        method,
        50 if steps is None else int(steps),
        1e-10 if tolerance is None else float(tolerance),
        print_every,
        t0,
    )


def _fit_adam(
    system: System,
    base_key: Any,
    make_loss: Callable[[Any], Callable[..., jax.Array]],
    z: dict[str, Any],
    batch: Context,
    measurements: Any,
    params: Mapping[str, FitParameter],
    contexts: list[Context],
    optimizer: optax.GradientTransformation,
    steps: int,
    tolerance: float,
    print_every: int,
    t0: float,
) -> FitResult:
    """Adam (any optax optimizer): one compiled step (cached across calls), called without waiting
    for its result (JAX's asynchronous dispatch: no host round trip per step); the losses are looked
    at every ``FIT_CHECK`` steps when a tolerance is set. Stops at ``steps`` or at the first step whose
    loss is below ``tolerance`` (the parameters are then those that gave it).

    (A ``lax.scan`` over the steps was measured slower: XLA compiles the differentiated simulation
    less well inside an outer loop — 0.305 s vs 0.210 s for 300 pendulum-fit steps.)"""

    def build(ref: Any) -> Any:
        loss_of = make_loss(ref)

        def step(z: Any, s: Any, batch: Context, meas: Any) -> Any:
            loss, g = jax.value_and_grad(loss_of)(z, batch, meas)
            updates, s = optimizer.update(g, s, z)
            return optax.apply_updates(z, updates), s, loss

        return jax.jit(step)

    step = _FIT_CACHE.get(system, ("adam", base_key, hashable_key(optimizer)), build)
    s = optimizer.init(z)
    losses: list[Any] = []
    inputs: list[Any] = []
    stopped_at = None
    check = FIT_CHECK if tolerance > 0 else (print_every or steps)
    if print_every:
        check = min(check, print_every)
    for k in range(steps):
        if tolerance > 0:
            inputs.append(z)
        z, s, loss = step(z, s, batch, measurements)
        losses.append(loss)
        if (k + 1) % check == 0 or k == steps - 1:
            window = np.asarray(jnp.stack(losses[len(losses) - len(inputs) if tolerance > 0 else -1 :]))
            if print_every:
                shown = {n: round(float(p.from_unconstrained(z[n])), 6) for n, p in params.items()}
                print(f"step {k + 1:5d}  loss {float(window[-1]):.3e}  {shown}")
            if tolerance > 0:
                below = np.nonzero(window < tolerance)[0]
                if below.size:
                    j = int(below[0])
                    z = inputs[j]
                    stopped_at = len(losses) - len(inputs) + j
                    break
                inputs = []
    history = np.asarray(jnp.stack(losses)) if losses else np.zeros(0)
    if stopped_at is not None:
        history = history[: stopped_at + 1]
        final = float(history[-1])
    else:
        # the loss at the fitted values: the compiled step evaluates it (its update is discarded), so no
        # second program is compiled for it
        final = float(step(z, s, batch, measurements)[2])
    fitted = {n: float(p.from_unconstrained(z[n])) for n, p in params.items()}
    return FitResult(
        fitted,
        set_parameters(contexts[0], params, fitted),
        history,
        final,
        len(history),
        time.perf_counter() - t0,
        "adam",
        stopped_at is not None,
        names=tuple(params),
    )


def _fit_least_squares(
    base_key: Any,
    system: System,
    params: Mapping[str, FitParameter],
    times: Any,
    observe: Any,
    integrator: Any,
    z: dict[str, Any],
    batch: Context,
    measurements: Any,
    contexts: list[Context],
    method: str,
    steps: int,
    tolerance: float,
    print_every: int,
    t0: float,
) -> FitResult:
    """Levenberg-Marquardt (Marquardt's scaling, lambda x10 on a rejected step, /10 on an accepted one)
    or Gauss-Newton (lambda = 0, with step halving when the cost does not decrease) on the residuals
    in the unconstrained variables; the covariance is then formed in the parameters themselves."""
    names = tuple(params)
    integ = integrator or RungeKutta4Integrator(max_step_size=0.01)
    obs = observe or (lambda c: c.get_continuous_state_vector())
    known = not isinstance(times, jax.core.Tracer)
    t_final = float(np.max(times)) if known else jnp.max(times)

    def residuals_of(ref: Any, values: jax.Array, batch: Context, meas: Any) -> jax.Array:
        system = deref(ref)
        vals = {n: values[i] for i, n in enumerate(names)}
        ctxs = jax.vmap(lambda c: set_parameters(c, params, vals))(batch)

        def one(ctx: Context, ts: Any, ys: Any) -> jax.Array:
            return (simulate(system, ctx, t_final, integ, save_at=ts, record=obs).ys - ys).reshape(-1)

        if np.ndim(times) == 1:
            return jax.vmap(lambda c, y: one(c, times, y))(ctxs, meas).reshape(-1)
        return jax.vmap(one)(ctxs, jnp.asarray(times), meas).reshape(-1)

    def to_values(u: jax.Array) -> jax.Array:
        return jnp.stack([params[n].from_unconstrained(u[i]) for i, n in enumerate(names)])

    def build(ref: Any) -> Any:
        def residuals_of_values(values: jax.Array, batch: Context, meas: Any) -> jax.Array:
            return residuals_of(ref, values, batch, meas)

        def linearize(u: jax.Array, batch: Context, meas: Any) -> Any:
            r = residuals_of_values(to_values(u), batch, meas)
            jac = jax.jacfwd(lambda uu: residuals_of_values(to_values(uu), batch, meas))(u)
            return r, jac

        def cost(u: jax.Array, batch: Context, meas: Any) -> jax.Array:
            r = residuals_of_values(to_values(u), batch, meas)
            return jnp.sum(r * r)

        def covariance(values: jax.Array, batch: Context, meas: Any) -> Any:
            r = residuals_of_values(values, batch, meas)
            jac = jax.jacfwd(lambda v: residuals_of_values(v, batch, meas))(values)
            return r, jac

        return (jax.jit(linearize), jax.jit(cost), jax.jit(covariance))

    linearize, cost, covariance = _FIT_CACHE.get(system, ("lsq", base_key), build)
    u = jnp.stack([z[n] for n in names])
    n_res = int(np.prod(measurements.shape))
    lam = 1e-3 if method == "levenberg_marquardt" else 0.0
    r, jac = linearize(u, batch, measurements)
    c = float(jnp.sum(r * r))
    history = [c / n_res]
    converged = False
    k = 0
    for k in range(1, steps + 1):
        jtj = np.asarray(jac.T @ jac)
        g = np.asarray(jac.T @ r)
        accepted = False
        for _ in range(30):
            a = jtj + lam * np.diag(np.maximum(np.diag(jtj), 1e-12))
            try:
                delta = -np.linalg.solve(a, g)
            except np.linalg.LinAlgError:
                delta = -np.linalg.lstsq(a, g, rcond=None)[0]
            step_size = 1.0
            if method == "gauss_newton":
                while step_size > 1e-6:
                    c_new = float(cost(u + step_size * delta, batch, measurements))
                    if np.isfinite(c_new) and c_new <= c:
                        break
                    step_size *= 0.5
            else:
                c_new = float(cost(u + delta, batch, measurements))
            if np.isfinite(c_new) and c_new <= c:
                accepted = True
                break
            if method == "gauss_newton":
                break
            lam *= 10.0
        if not accepted:
            converged = True  # no step lowers the cost: a minimum (to what the model resolves)
            break
        u_new = u + step_size * jnp.asarray(delta)
        decrease = (c - c_new) / max(c, 1e-300)
        small_step = float(np.max(np.abs(step_size * delta))) < 1e-12 * (1.0 + float(jnp.max(jnp.abs(u))))
        u, c = u_new, c_new
        if method == "levenberg_marquardt":
            lam = max(lam / 10.0, 1e-12)
        history.append(c / n_res)
        if print_every and k % print_every == 0:
            shown = {n: round(float(v), 6) for n, v in zip(names, np.asarray(to_values(u)))}
            print(f"iteration {k:4d}  loss {c / n_res:.3e}  {shown}")
        if decrease < tolerance or small_step:
            converged = True
            break
        r, jac = linearize(u, batch, measurements)
    values = to_values(u)
    # the Jacobian in the parameters themselves from the compiled one in u (values[i] depends on u[i]
    # alone: a column scaling by dvalue/du, exact to rounding, as jacfwd in u seeds that same factor),
    # so the covariance compiles nothing new; a factor that underflowed falls back to its own program
    r, jac_u = linearize(u, batch, measurements)
    dv_du = np.diag(np.asarray(jax.jacfwd(to_values)(u)))
    if np.all(np.isfinite(dv_du)) and np.all(np.abs(dv_du) > np.finfo(dv_du.dtype).tiny):
        r, jac_v = np.asarray(r), np.asarray(jac_u) / dv_du[None, :]
    else:
        r, jac_v = covariance(values, batch, measurements)
        r, jac_v = np.asarray(r), np.asarray(jac_v)
    dof = max(n_res - len(names), 1)
    s2 = float(r @ r) / dof
    try:
        cov = s2 * np.linalg.inv(jac_v.T @ jac_v)
    except np.linalg.LinAlgError:
        cov = np.full((len(names), len(names)), np.nan)
    fitted = {n: float(v) for n, v in zip(names, np.asarray(values))}
    errors = {n: float(np.sqrt(max(cov[i, i], 0.0))) for i, n in enumerate(names)}
    _warn_if_quantized(fitted, errors, np.asarray(values).dtype)
    return FitResult(
        fitted,
        set_parameters(contexts[0], params, fitted),
        np.asarray(history),
        float(r @ r) / n_res,
        k,
        time.perf_counter() - t0,
        method,
        converged,
        cov,
        errors,
        s2,
        names,
    )


__all__ = ["FitParameter", "FitResult", "fit_parameters", "set_parameters", "trajectory_loss"]
