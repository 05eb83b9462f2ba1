"""Simulation: the pure, jit-able ``simulate`` and a Drake-style ``Simulator`` wrapper.

``simulate(system, context, t_final, integrator, save_at)`` integrates the continuous state of any
System or Diagram from ``context`` to ``t_final`` inside one compiled loop and returns a
:class:`SimulationResult` (final context, recorded values, Drake's integrator statistics, status).

* Fixed-step integration whose step count is known when tracing is a ``lax.scan``: exactly
  ``ceil((t_final - t0) / h)`` steps with time computed as ``t0 + n h`` (Drake accumulates time by
  addition and takes 10001 steps of 1e-3 to reach 10 s; jaxsys takes 10000).
* Error-controlled integration (and fixed steps whose count is only known at run time) is an
  ``equinox.internal.while_loop(kind="bounded")`` over step *attempts*, bounded by
  ``integrator.max_steps``. This loop kind supports ``jit``, ``vmap``, ``jvp``/``jacfwd`` and
  ``grad``/``jacrev`` in the same default configuration. Each attempt follows Drake's
  ``IntegratorBase::StepOnceErrorControlledAtMost`` and ``CalcAdjustedStepSize`` (safety 0.9,
  shrink at least to 0.9 h and at most to 0.1 h, grow at most 5x and only by more than 1.2x,
  the 0.95 / 1.001 rules for steps limited by a boundary), with Drake's weighted infinity norm
  of the error estimate.
* ``save_at`` times are boundaries the integrator steps to exactly (as Drake's ``AdvanceTo`` does);
  the values recorded there are exact, not interpolated.
* Problems are never silent: exceeding ``max_steps``, a step below the minimum, or a non-finite
  state sets ``result.status``; with ``throw=True`` (default) an error is raised
  (``equinox.error_if``, so it works inside ``jit``).
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable
from typing import Any

import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context
from ..framework.errors import JaxsysError
from ..framework.system import System
from .integrators import IntegratorBase, RungeKutta3Integrator


Array = jax.Array

ROLLED_STAGES_MIN_LEAVES = 16
STATUS_OK = 0
STATUS_MAX_STEPS = 1
STATUS_MIN_STEP = 2
STATUS_NONFINITE = 3
STATUS_MESSAGES = {
    STATUS_OK: "ok",
    STATUS_MAX_STEPS: "The maximum number of integrator step attempts (integrator max_steps) was reached "
    "before t_final. Increase max_steps, or loosen target_accuracy.",
    STATUS_MIN_STEP: "Error control wants to select a step smaller than the minimum allowed "
    "(requested_minimum_step_size, or the working minimum ~1e-14 t). This is typically an indication that "
    "some part of your system with continuous state is going unstable and/or is producing excessively "
    "large derivatives.",
    STATUS_NONFINITE: "The continuous state became NaN or infinite.",
}


class IntegratorStatistics(eqx.Module):
    """Drake's integrator statistics, as arrays (available after a jitted run).

    ``smallest_adapted_step_size_taken`` is NaN in fixed-step mode (Drake: not applicable).
    """

    num_steps_taken: Array
    num_derivative_evaluations: Array
    num_step_shrinkages_from_error_control: Array
    num_substep_failures: Array
    num_step_shrinkages_from_substep_failures: Array
    smallest_adapted_step_size_taken: Array
    largest_step_size_taken: Array
    actual_initial_step_size_taken: Array
    previous_integration_step_size: Array
    num_step_attempts: Array

    def as_dict(self) -> dict[str, float]:
        """Plain Python numbers, keyed by Drake's names."""
        return {k: np.asarray(getattr(self, k)).item() for k in self.__dataclass_fields__}


class SimulationResult(eqx.Module):
    """The result of :func:`simulate`.

    **Fields:**
    - `context`: the final context (time ``t_final``).
    - `ts`: the ``save_at`` times, shape ``(n,)``.
    - `ys`: the recorded values at ``ts`` (the ``record`` function's pytree with a leading axis n).
    - `stats`: :class:`IntegratorStatistics`.
    - `status`: 0 ok; else a code of :data:`STATUS_MESSAGES`.
    """

    context: Context
    ts: Array
    ys: Any
    stats: IntegratorStatistics
    status: Array

    def message(self) -> str:
        """The status as text (for a concrete, unbatched result)."""
        return STATUS_MESSAGES[int(self.status)]


def _default_record(context: Context) -> Array:
    return context.get_continuous_state_vector()


def _state_norm(system: System, context: Context, dx: Array, integrator: IntegratorBase) -> Array:
    """Drake's ``CalcStateChangeNorm``: weighted infinity norm over q (through N), v and z."""
    cs = context.get_continuous_state()
    nq, nv = cs.num_q, cs.num_v
    dq, dv, dz = dx[:nq], dx[nq : nq + nv], dx[nq + nv :]
    parts = []
    wv = None if integrator.qbar_weight is None else jnp.asarray(integrator.qbar_weight, dx.dtype)
    wz = None if integrator.z_weight is None else jnp.asarray(integrator.z_weight, dx.dtype)
    if nv:
        parts.append(jnp.max(jnp.abs(dv if wv is None else wv * dv)))
    if nq:
        if wv is None and nq == nv and _has_identity_maps(system):
            parts.append(jnp.max(jnp.abs(dq)))
        else:
            pinv = system._map_raw(context, dq, "qdot_to_v")
            wq = system._map_raw(context, pinv if wv is None else wv * pinv, "v_to_qdot")
            parts.append(jnp.max(jnp.abs(wq)))
    if dz.shape[0]:
        parts.append(jnp.max(jnp.abs(dz if wz is None else wz * dz)))
    if not parts:
        return jnp.zeros((), dx.dtype)
    out = parts[0]
    for p in parts[1:]:
        out = jnp.maximum(out, p)
    return jnp.where(jnp.any(jnp.isnan(dx)), jnp.nan, out)


def _has_identity_maps(system: System) -> bool:
    from ..framework.diagram import Diagram
    from ..framework.leaf_system import LeafSystem

    if isinstance(system, Diagram):
        return all(_has_identity_maps(s) for s in system.subsystems)
    if isinstance(system, LeafSystem):
        t = type(system)
        return (
            t.do_map_velocity_to_qdot is LeafSystem.do_map_velocity_to_qdot
            and t.do_map_qdot_to_velocity is LeafSystem.do_map_qdot_to_velocity
        )
    return False


def _concrete(x: Any) -> Any:
    try:
        return np.asarray(x) if not isinstance(x, jax.core.Tracer) else None
    except Exception:  # noqa: BLE001
        return None


def _check_inputs(system: System, context: Context, integrator: IntegratorBase) -> None:
    if not isinstance(system, System):
        raise JaxsysError(f"simulate: expected a System, got {type(system).__name__}.")
    system.validate_context(context)
    if not isinstance(integrator, IntegratorBase):
        raise JaxsysError(f"simulate: integrator must be an IntegratorBase, got {type(integrator).__name__}.")


def simulate(
    system: System,
    context: Context,
    t_final: float | Array,
    integrator: IntegratorBase | None = None,
    save_at: Any = None,
    record: Callable[[Context], Any] | None = None,
    throw: bool = True,
) -> SimulationResult:
    """Integrate ``system`` from ``context`` to ``t_final`` (Drake's ``Simulator::AdvanceTo``, pure).

    **Arguments:**
    - `system`: any System or Diagram.
    - `context`: its context at the start time (``context.get_time()``).
    - `t_final`: end time, s.
    - `integrator`: an integrator module (default: Drake's default, ``RungeKutta3Integrator`` with
      ``max_step_size=0.1`` and target accuracy 1e-4, as in Drake's ``SimulatorConfig``).
    - `save_at`: increasing times in [t0, t_final] at which to record (default: none).
    - `record`: ``f(context) -> pytree`` recorded at ``save_at`` (default: the continuous state
      vector). Use it to record outputs, e.g. ``lambda c: diagram.get_output_port(0).eval(c)``.
    - `throw`: raise on failure (default); if False, inspect ``result.status``.

    **Returns:** a :class:`SimulationResult`. Works under ``jax.jit`` (make ``system`` and
    ``integrator`` static, e.g. with ``eqx.filter_jit``), ``jax.vmap`` over contexts, and
    ``jax.grad`` / ``jax.jvp`` with respect to anything numeric in the context.
    """
    if integrator is None:
        integrator = RungeKutta3Integrator(max_step_size=0.1, target_accuracy=1e-4)
    _check_inputs(system, context, integrator)
    record = record or _default_record
    t0 = context.get_time()
    dtype = t0.dtype
    t_final_arr = jnp.asarray(t_final, dtype)
    if save_at is None:
        ts = jnp.zeros((0,), dtype)
    else:
        ts = jnp.asarray(save_at, dtype).reshape(-1)
        c_ts = _concrete(ts)
        c_tf = _concrete(t_final_arr)
        if c_ts is not None and c_ts.size > 1 and np.any(np.diff(c_ts) <= 0):
            raise JaxsysError("simulate: save_at must be strictly increasing.")
        if c_ts is not None and c_tf is not None and c_ts.size and c_ts[-1] > c_tf * (1 + 1e-12) + 1e-15:
            raise JaxsysError(f"simulate: save_at goes past t_final ({c_ts[-1]} > {c_tf}).")
    c_t0, c_tf = _concrete(t0), _concrete(t_final_arr)
    if c_t0 is not None and c_tf is not None and c_tf < c_t0:
        raise JaxsysError(
            f"simulate: t_final={float(c_tf)} is before the context's time {float(c_t0)} (Drake: "
            f"'boundary_time >= context->get_time()' failed)."
        )

    x0 = context.get_continuous_state_vector()
    cs = context.get_continuous_state()

    def ctx_at(t: Array, x: Array) -> Context:
        return context.with_time(t).with_continuous_state(x)

    def f(t: Array, x: Array) -> Array:
        return system._calc_time_derivatives_raw(ctx_at(t, x))

    aux = {
        "num_q": cs.num_q,
        "num_v": cs.num_v,
        "v_to_qdot": lambda t, x, v: system._map_raw(ctx_at(t, x), v, "v_to_qdot"),
        # Large diagrams: evaluate RK stages in a loop so the dynamics are traced and compiled once.
        "rolled": len(context._leaf_contexts()) > ROLLED_STAGES_MIN_LEAVES,
    }

    fixed = integrator.get_fixed_step_mode()
    h_fixed = integrator.max_step_size
    n_fixed = None
    save_idx = None
    if fixed and c_t0 is not None and c_tf is not None:
        span = float(c_tf - c_t0)
        n_fixed = max(int(np.ceil(span / h_fixed - 1e-9)), 0)
        if span > 0 and n_fixed >= 1 and span - (n_fixed - 1) * h_fixed <= 1e-9 * h_fixed:
            n_fixed -= 1
        c_ts = _concrete(ts)
        if c_ts is not None:
            idx = np.rint((c_ts - float(c_t0)) / h_fixed).astype(np.int64)
            on_grid = np.all(np.abs(float(c_t0) + idx * h_fixed - c_ts) <= 1e-9 * max(1.0, abs(float(c_tf))))
            on_grid = on_grid or np.all((idx == n_fixed) | (np.abs(float(c_t0) + idx * h_fixed - c_ts) <= 1e-9))
            last_ok = np.all(idx <= n_fixed)
            if on_grid and last_ok:
                idx = np.where(np.abs(c_ts - float(c_tf)) <= 1e-12 * max(1.0, abs(float(c_tf))), n_fixed, idx)
                save_idx = idx
            else:
                n_fixed = None
        else:
            n_fixed = None

    if fixed and n_fixed is not None:
        result = _simulate_scan(system, context, integrator, f, aux, record, x0, t0, t_final_arr, ts, n_fixed, save_idx)
    else:
        result = _simulate_while(system, context, integrator, f, aux, record, x0, t0, t_final_arr, ts, fixed)
    if throw:
        status = result.status
        result = eqx.error_if(result, status == STATUS_MAX_STEPS, STATUS_MESSAGES[STATUS_MAX_STEPS])
        result = eqx.error_if(result, result.status == STATUS_MIN_STEP, STATUS_MESSAGES[STATUS_MIN_STEP])
        result = eqx.error_if(result, result.status == STATUS_NONFINITE, STATUS_MESSAGES[STATUS_NONFINITE])
    return result


def _record_buffer(record: Callable[[Context], Any], context: Context, n: int) -> Any:
    proto = record(context)
    return jax.tree_util.tree_map(lambda a: jnp.zeros((n,) + jnp.shape(a), jnp.result_type(a)), proto)


def _write(buf: Any, k: Array, value: Any, hit: Array) -> Any:
    def upd(b: Array, v: Array) -> Array:
        kk = jnp.clip(k, 0, b.shape[0] - 1)
        return b.at[kk].set(jnp.where(hit, v, b[kk]))

    if jax.tree_util.tree_leaves(buf) and jax.tree_util.tree_leaves(buf)[0].shape[0] == 0:
        return buf
    return jax.tree_util.tree_map(upd, buf, value)


def _simulate_scan(
    system: System,
    context: Context,
    integrator: IntegratorBase,
    f: Callable[..., Array],
    aux: Any,
    record: Callable[[Context], Any],
    x0: Array,
    t0: Array,
    t_final: Array,
    ts: Array,
    n_steps: int,
    save_idx: np.ndarray | None,
) -> SimulationResult:
    dtype = t0.dtype
    h = jnp.asarray(integrator.max_step_size, dtype)
    n_save = int(ts.shape[0])
    buf = _record_buffer(record, context, n_save)
    idx = jnp.asarray(save_idx if save_idx is not None else np.zeros(0, np.int64), jnp.int32)
    # values due at step 0 (t = t0)
    k0 = int(np.sum(save_idx == 0)) if save_idx is not None else 0
    if k0:
        first = record(context)
        buf = jax.tree_util.tree_map(lambda b, v: b.at[:k0].set(v), buf, first)

    def step(carry: Any, n: Array) -> Any:
        x, k, buf, ok = carry
        t = t0 + n.astype(dtype) * h
        t_next = jnp.where(n + 1 == n_steps, t_final, t0 + (n + 1).astype(dtype) * h)
        x_new, _, step_ok = integrator.attempt_step(f, t, x, t_next - t, aux)
        finite = jnp.all(jnp.isfinite(x_new))
        if n_save:
            hit = (k < n_save) & (idx[jnp.clip(k, 0, n_save - 1)] == n + 1)
            buf = _write(buf, k, record(context.with_time(t_next).with_continuous_state(x_new)), hit)
            k = k + hit.astype(k.dtype)
        return (x_new, k, buf, ok & finite & step_ok), None

    m = int(save_idx[0]) if save_idx is not None and save_idx.size else 0
    evenly = (
        save_idx is not None
        and save_idx.size > 0
        and m > 0
        and k0 == 0
        and np.array_equal(save_idx, m * np.arange(1, save_idx.size + 1))
    )
    if evenly:
        # Save times on a regular grid: an outer scan over save intervals of an inner scan of
        # plain steps, recording once per interval (no per-step masked writes).
        n_out = int(save_idx.size)

        def plain(x: Array, n: Array) -> tuple[Array, None]:
            t = t0 + n.astype(dtype) * h
            t_next = jnp.where(n + 1 == n_steps, t_final, t0 + (n + 1).astype(dtype) * h)
            x_new, _, _ = integrator.attempt_step(f, t, x, t_next - t, aux)
            return x_new, None

        def interval(x: Array, j: Array) -> tuple[Array, Any]:
            x, _ = jax.lax.scan(plain, x, j * m + jnp.arange(m, dtype=jnp.int32))
            t_j = jnp.where((j + 1) * m == n_steps, t_final, t0 + ((j + 1) * m).astype(dtype) * h)
            return x, record(context.with_time(t_j).with_continuous_state(x))

        x, buf = jax.lax.scan(interval, x0, jnp.arange(n_out, dtype=jnp.int32))
        if n_steps > n_out * m:
            x, _ = jax.lax.scan(plain, x, jnp.arange(n_out * m, n_steps, dtype=jnp.int32))
        ok = jnp.all(jnp.isfinite(x))
    else:
        init = (x0, jnp.asarray(k0, jnp.int32), buf, jnp.array(True))
        (x, _, buf, ok), _ = jax.lax.scan(step, init, jnp.arange(n_steps, dtype=jnp.int32))
    final = context.with_time(t_final).with_continuous_state(x)
    n = jnp.asarray(n_steps, jnp.int32)
    last_h = t_final - (t0 + (n_steps - 1) * h) if n_steps else jnp.zeros((), dtype)
    stats = IntegratorStatistics(
        num_steps_taken=n,
        num_derivative_evaluations=n * integrator.num_evaluations(),
        num_step_shrinkages_from_error_control=jnp.zeros((), jnp.int32),
        num_substep_failures=jnp.zeros((), jnp.int32),
        num_step_shrinkages_from_substep_failures=jnp.zeros((), jnp.int32),
        smallest_adapted_step_size_taken=jnp.full((), jnp.nan, dtype),
        largest_step_size_taken=h if n_steps > 1 else jnp.asarray(last_h, dtype),
        actual_initial_step_size_taken=jnp.minimum(h, t_final - t0) if n_steps else jnp.full((), jnp.nan, dtype),
        previous_integration_step_size=jnp.asarray(last_h, dtype),
        num_step_attempts=n,
    )
    status = jnp.where(ok, STATUS_OK, STATUS_NONFINITE).astype(jnp.int32)
    return SimulationResult(final, ts, buf, stats, status)


def _adjust_step(
    integrator: IntegratorBase, err: Array, h: Array, at_min: Array, working_min: Array
) -> tuple[Array, Array, Array, Array]:
    """Drake's ``CalcAdjustedStepSize``: returns (success, new step, at_min, min-step violation)."""
    safety, min_shrink, max_grow, hyst_low, hyst_high = 0.9, 0.1, 5.0, 0.9, 1.2
    acc = integrator.get_accuracy_in_use()
    order = integrator.get_error_estimate_order()
    bad = ~jnp.isfinite(err)
    safe_err = jnp.where((err > 0) & ~bad, err, 1.0)
    new = jnp.where(err == 0, max_grow * h, safety * h * (acc / safe_err) ** (1.0 / order))
    grow = new > h
    at_min = jnp.where(grow, False, at_min)
    new = jnp.where(grow & (new < hyst_high * h), h, new)
    early_success = (new < h) & at_min
    shrink = new < h
    new = jnp.where(shrink, jnp.where(err <= acc, h, jnp.minimum(new, hyst_low * h)), new)
    new = jnp.clip(new, min_shrink * h, max_grow * h)
    new = jnp.maximum(new, integrator.requested_minimum_step_size)
    new = jnp.minimum(new, integrator.max_step_size)
    new = jnp.maximum(new, working_min)
    hit_min = new == working_min
    violation = hit_min & (new < h) & integrator.throw_on_minimum_step_size_violation & ~early_success
    at_min = at_min | hit_min
    success = new >= h
    success = jnp.where(early_success, True, success)
    new = jnp.where(early_success, h, new)
    success = jnp.where(bad, False, success)
    new = jnp.where(bad, min_shrink * h, new)
    return success, new, at_min, violation


def _simulate_while(
    system: System,
    context: Context,
    integrator: IntegratorBase,
    f: Callable[..., Array],
    aux: Any,
    record: Callable[[Context], Any],
    x0: Array,
    t0: Array,
    t_final: Array,
    ts: Array,
    fixed: bool,
) -> SimulationResult:
    dtype = t0.dtype
    n_save = int(ts.shape[0])
    inf = jnp.asarray(jnp.inf, dtype)
    buf = _record_buffer(record, context, n_save)
    max_step = jnp.asarray(integrator.max_step_size, dtype)
    stretch = integrator.stretch_factor
    i32 = jnp.int32

    # record values due at t0
    if n_save:
        hit0 = ts <= t0
        k0 = jnp.sum(hit0).astype(i32)
        first = record(context)
        buf = jax.tree_util.tree_map(
            lambda b, v: jnp.where(hit0.reshape((-1,) + (1,) * (b.ndim - 1)), v, b), buf, first
        )
    else:
        k0 = jnp.zeros((), i32)

    zero_i = jnp.zeros((), i32)
    nan = jnp.full((), jnp.nan, dtype)
    init = dict(
        t=t0,
        x=x0,
        t_seg=t0,  # fixed mode: time of the last boundary, steps counted from it
        n_seg=zero_i,
        h_try=jnp.asarray(integrator.get_initial_step_size_target(), dtype),
        h_ideal=jnp.asarray(integrator.get_initial_step_size_target(), dtype),
        at_min=jnp.array(False),
        k=k0,
        buf=buf,
        status=zero_i,
        steps=zero_i,
        attempts=zero_i,
        evals=zero_i,
        shrink_err=zero_i,
        substep_fail=zero_i,
        smallest=nan,
        largest=jnp.zeros((), dtype),
        initial=nan,
        previous=nan,
    )

    def next_save(k: Array) -> Array:
        if not n_save:
            return inf
        return jnp.where(k < n_save, ts[jnp.clip(k, 0, n_save - 1)], inf)

    def cond(c: dict) -> Array:
        return ((c["t"] < t_final) | (c["k"] < n_save)) & (c["status"] == STATUS_OK)

    def body(c: dict) -> dict:
        t, x = c["t"], c["x"]
        boundary = jnp.minimum(next_save(c["k"]), t_final)
        h_max = boundary - t
        if fixed:
            t_grid = c["t_seg"] + (c["n_seg"] + 1).astype(dtype) * max_step
            stretch_ok = boundary <= c["t_seg"] + (c["n_seg"].astype(dtype) + stretch) * max_step
            h = jnp.where(stretch_ok, h_max, t_grid - t)
            limited = jnp.array(False)
        else:
            h_att = c["h_try"]
            limited = h_max < 0.95 * h_att
            h_att = jnp.where(limited | (h_max < 1.001 * h_att), h_max, h_att)
            h = jnp.minimum(h_att, max_step)
        h = jnp.maximum(h, 0.0)
        x_new, err, ok = integrator.attempt_step(f, t, x, h, aux)
        evals = c["evals"] + integrator.num_evaluations()
        attempts = c["attempts"] + 1
        reaches_boundary = h >= h_max
        t_new = jnp.where(reaches_boundary, boundary, t + h)
        if fixed:
            success = jnp.array(True)
            substep_fail = c["substep_fail"]
            shrink_err = c["shrink_err"]
            h_next = c["h_try"]
            at_min = c["at_min"]
            violation = jnp.array(False)
            finite_bad = ~jnp.all(jnp.isfinite(x_new)) | ~ok
        else:
            working_min = jnp.maximum(integrator.requested_minimum_step_size, 1e-14 * jnp.maximum(1.0, jnp.abs(t)))
            ctx_new = context.with_time(t_new).with_continuous_state(jnp.where(jnp.isfinite(x_new), x_new, 0.0))
            err_norm = _state_norm(system, ctx_new, err, integrator)
            err_norm = jnp.where(jnp.all(jnp.isfinite(x_new)), err_norm, jnp.nan)
            success, h_next, at_min, violation = _adjust_step(integrator, err_norm, h, c["at_min"], working_min)
            # a Newton failure is a sub-step failure: halve the step (Drake's subdivision factor)
            success = success & ok
            h_next = jnp.where(ok, h_next, 0.5 * h)
            limited = limited | ~ok
            substep_fail = c["substep_fail"] + (~ok).astype(i32)
            shrink_err = c["shrink_err"] + (ok & ~success).astype(i32)
            violation = violation & ok
            finite_bad = jnp.array(False)
        accept = success & ~violation & ~finite_bad
        # statistics of accepted steps
        steps = c["steps"] + accept.astype(i32)
        initial = jnp.where(accept & jnp.isnan(c["initial"]), h, c["initial"])
        if fixed:
            smallest = c["smallest"]
        else:
            smallest = jnp.where(
                accept & (jnp.isnan(c["smallest"]) | ((h < c["smallest"]) & (h < h_max))), h, c["smallest"]
            )
        largest = jnp.where(accept, jnp.maximum(c["largest"], h), c["largest"])
        previous = jnp.where(accept, h, c["previous"])
        h_ideal = jnp.where(accept & ~limited, h_next, c["h_ideal"])
        h_try = jnp.where(accept, h_ideal, h_next)
        t_acc = jnp.where(accept, t_new, t)
        x_acc = jnp.where(accept, x_new, x)
        hit = accept & reaches_boundary & (c["k"] < n_save) & (boundary == next_save(c["k"]))
        if n_save:
            buf = _write(c["buf"], c["k"], record(context.with_time(t_acc).with_continuous_state(x_acc)), hit)
        else:
            buf = c["buf"]
        k = c["k"] + hit.astype(i32)
        t_seg = jnp.where(accept & reaches_boundary, t_new, c["t_seg"])
        n_seg = jnp.where(accept & reaches_boundary, 0, c["n_seg"] + accept.astype(i32))
        status = jnp.where(violation, STATUS_MIN_STEP, jnp.where(finite_bad, STATUS_NONFINITE, c["status"]))
        return dict(
            t=t_acc,
            x=x_acc,
            t_seg=t_seg,
            n_seg=n_seg,
            h_try=h_try,
            h_ideal=h_ideal,
            at_min=at_min,
            k=k,
            buf=buf,
            status=status.astype(i32),
            steps=steps,
            attempts=attempts,
            evals=evals,
            shrink_err=shrink_err,
            substep_fail=substep_fail,
            smallest=smallest,
            largest=largest,
            initial=initial,
            previous=previous,
        )

    out = eqxi.while_loop(cond, body, init, max_steps=integrator.max_steps, kind="bounded")
    unfinished = ((out["t"] < t_final) | (out["k"] < n_save)) & (out["status"] == STATUS_OK)
    status = jnp.where(unfinished, STATUS_MAX_STEPS, out["status"]).astype(i32)
    final = context.with_time(out["t"]).with_continuous_state(out["x"])
    stats = IntegratorStatistics(
        num_steps_taken=out["steps"],
        num_derivative_evaluations=out["evals"],
        num_step_shrinkages_from_error_control=out["shrink_err"],
        num_substep_failures=out["substep_fail"],
        num_step_shrinkages_from_substep_failures=out["substep_fail"],
        smallest_adapted_step_size_taken=out["smallest"],
        largest_step_size_taken=out["largest"],
        actual_initial_step_size_taken=out["initial"],
        previous_integration_step_size=out["previous"],
        num_step_attempts=out["attempts"],
    )
    return SimulationResult(final, ts, out["buf"], stats, status)


class Simulator:
    """A thin, stateful Drake-style wrapper around :func:`simulate` (Drake's ``Simulator``).

    ``Simulator(system, context=None, integrator=None)``; ``initialize()``, ``advance_to(t)``,
    ``get_context()``, ``get_mutable_context()``, ``get_integrator()`` / ``get_mutable_integrator()``,
    ``reset_integrator(integrator)``, ``set_target_realtime_rate(rate)``, statistics. Each
    ``advance_to`` runs one compiled call (compiled once per system/integrator); the final context
    of one call is the start of the next.
    """

    def __init__(self, system: System, context: Context | None = None, integrator: IntegratorBase | None = None):
        self._system = system
        self._context = context if context is not None else system.create_default_context()
        system.validate_context(self._context)
        self._integrator = integrator or RungeKutta3Integrator(max_step_size=0.1, target_accuracy=1e-4)
        self._rate = 0.0
        self._initialized = False
        self._stats: dict[str, float] = {}
        self._compiled: Any = None
        self._wall_start = 0.0
        self._sim_start = 0.0

    def _advance_fn(self) -> Any:
        if self._compiled is None:
            system, integrator = self._system, self._integrator

            @jax.jit
            def advance(context: Context, t_final: Array) -> SimulationResult:
                return simulate(system, context, t_final, integrator)

            self._compiled = advance
        return self._compiled

    def initialize(self) -> None:
        """Prepare to simulate (Drake: ``Initialize``). Events are handled by a later release."""
        self._initialized = True
        self._wall_start = _time.perf_counter()
        self._sim_start = float(self._context.get_time())

    def advance_to(self, boundary_time: float) -> Context:
        """Advance the context to ``boundary_time`` (Drake: ``AdvanceTo``); returns the new context."""
        if not self._initialized:
            self.initialize()
        t = float(self._context.get_time())
        if boundary_time < t:
            raise JaxsysError(
                f"Simulator.advance_to({boundary_time}): the context is already at t={t}; time cannot go backwards."
            )
        result = self._advance_fn()(self._context, jnp.asarray(boundary_time, self._context.time.dtype))
        self._context = result.context
        for k, v in result.stats.as_dict().items():
            if k.startswith("num_"):
                self._stats[k] = self._stats.get(k, 0) + v
            else:
                self._stats[k] = v
        if self._rate > 0:
            target_wall = (boundary_time - self._sim_start) / self._rate
            elapsed = _time.perf_counter() - self._wall_start
            if target_wall > elapsed:
                _time.sleep(target_wall - elapsed)
        return self._context

    def get_context(self) -> Context:
        """The current context (Drake: ``get_context``)."""
        return self._context

    get_mutable_context = get_context

    def reset_context(self, context: Context) -> None:
        """Replace the context (Drake: ``reset_context``)."""
        self._system.validate_context(context)
        self._context = context
        self._initialized = False

    def get_integrator(self) -> IntegratorBase:
        """The integrator (Drake: ``get_integrator``)."""
        return self._integrator

    get_mutable_integrator = get_integrator

    def reset_integrator(self, integrator: IntegratorBase) -> IntegratorBase:
        """Use another integrator from now on (Drake: ``reset_integrator``); returns it.

        Integrators are immutable: to change an option, pass ``integrator.with_options(...)``.
        """
        self._integrator = integrator
        self._compiled = None
        return integrator

    def set_target_realtime_rate(self, rate: float) -> None:
        """Pace ``advance_to`` to ``rate`` x wall-clock time (1.0 = real time; 0 = as fast as possible)."""
        self._rate = max(0.0, float(rate))
        self._wall_start = _time.perf_counter()
        self._sim_start = float(self._context.get_time())

    def get_target_realtime_rate(self) -> float:
        """Drake: ``get_target_realtime_rate``."""
        return self._rate

    def get_statistics(self) -> dict[str, float]:
        """Accumulated integrator statistics (counts summed over ``advance_to`` calls)."""
        return dict(self._stats)

    def get_num_steps_taken(self) -> int:
        """Drake: ``get_num_steps_taken``."""
        return int(self._stats.get("num_steps_taken", 0))

    def get_system(self) -> System:
        """Drake: ``get_system``."""
        return self._system
