"""Fitting numeric parameters of a system to measured trajectories.

``fit_parameters`` minimizes the mean squared error between what ``simulate`` records at the
measurement times and the measurements, over one or several experiments (batched with ``vmap``),
with an optax optimizer on ``jax.value_and_grad`` of the loss. Bounds and positivity are handled by
a change of variables (sigmoid onto [lo, hi], softplus onto (0, inf)), so the optimizer is
unconstrained.

Imports (within jaxsys): the framework's ``context``, ``errors``, ``system``; ``integrators``,
``simulate``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..framework.context import Context
from ..framework.errors import JaxsysError
from ..framework.system import System
from .integrators import IntegratorBase, RungeKutta4Integrator
from .simulate import simulate


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
    """The outcome of :func:`fit_parameters`.

    **Fields:** `params` (name -> fitted value), `context` (the first experiment's context with the
    fitted parameters), `loss_history`, `final_loss`, `steps`, `seconds`.
    """

    params: dict[str, float]
    context: Context
    loss_history: np.ndarray
    final_loss: float
    steps: int
    seconds: float


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
    steps: int = 500,
    tolerance: float = 0.0,
    print_every: int = 0,
) -> FitResult:
    """Fit scalar numeric parameters of ``system`` to measured trajectories.

    **Arguments:**
    - `contexts`: one context per experiment (initial state, inputs, other parameters), or a list.
    - `params`: name -> :class:`FitParameter` (which entry of which numeric parameter, and bounds).
    - `times`: measurement times, shape (n,) shared by all experiments, or (experiments, n).
    - `measurements`: shape (experiments, n, k): what ``observe(context)`` should be at those times.
    - `initial`: starting values (default: the values in the first context).
    - `observe`: ``context -> (k,)``; default: the continuous state vector.
    - `integrator`: default fixed-step RK4 with h = 0.01 s.
    - `optimizer`: an optax transformation (default ``optax.adam(0.05)``).
    - `steps`, `tolerance`: stop after ``steps`` or when the loss is below ``tolerance``.
    - `print_every`: print the loss and parameters every this many steps (0: silent).

    Returns a :class:`FitResult`.
    """
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
    measurements = jnp.asarray(measurements)
    _check_measurements(system, contexts, times, measurements, observe)
    start = initial or {n: float(contexts[0].get_numeric_parameter(p.group)[p.element]) for n, p in params.items()}
    z = {n: p.to_unconstrained(float(start[n])) for n, p in params.items()}
    optimizer = optimizer or optax.adam(0.05)
    opt_state = optimizer.init(z)

    def loss_of(z: Mapping[str, Any]) -> jax.Array:
        values = {n: p.from_unconstrained(z[n]) for n, p in params.items()}
        ctxs = jax.vmap(lambda c: set_parameters(c, params, values))(batch)
        return trajectory_loss(system, ctxs, times, measurements, observe, integrator)

    @jax.jit
    def step(z: Any, opt_state: Any) -> tuple[Any, Any, jax.Array]:
        loss, g = jax.value_and_grad(loss_of)(z)
        updates, opt_state = optimizer.update(g, opt_state, z)
        return optax.apply_updates(z, updates), opt_state, loss

    history = []
    t0 = time.perf_counter()
    for k in range(steps):
        z, opt_state, loss = step(z, opt_state)
        history.append(float(loss))
        if print_every and (k % print_every == 0 or k == steps - 1):
            shown = {n: round(float(p.from_unconstrained(z[n])), 6) for n, p in params.items()}
            print(f"step {k:5d}  loss {float(loss):.3e}  {shown}")
        if history[-1] < tolerance:
            break
    fitted = {n: float(p.from_unconstrained(z[n])) for n, p in params.items()}
    # the loss at the fitted values: the compiled step evaluates it (its update is discarded), so no
    # second program is compiled for it
    final = float(step(z, opt_state)[2])
    return FitResult(
        fitted,
        set_parameters(contexts[0], params, fitted),
        np.asarray(history),
        final,
        len(history),
        time.perf_counter() - t0,
    )
