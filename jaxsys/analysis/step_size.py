"""Step-size selection: which step to attempt, and whether to accept it (Drake's rules).

* `choose_step`: the step to attempt from t toward a boundary (the next event time, save time
  or ``t_final``): Drake's ``IntegrateAtMost`` truncation with the stretch factor, and the fixed-step
  grid of fixed-step mode.
* `error_control`: accept or reject an attempted step and choose the next one: Drake's
  ``StepOnceErrorControlledAtMost`` with ``CalcAdjustedStepSize`` (`adjust_step_size`) on the
  weighted infinity norm of the error estimate (`state_change_norm`, Drake's
  ``CalcStateChangeNorm``); Newton failures of implicit methods are sub-step failures.

Imports: the framework (System, Context) and `integrators.base`, `results` only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ..framework.context import Context
from ..framework.diagram import Diagram
from ..framework.leaf_system import LeafSystem
from ..framework.system import System
from .integrators.base import IntegratorBase
from .results import STATUS_MIN_STEP, STATUS_NEWTON_FAILED, STATUS_NONFINITE


Array = jax.Array


class StepChoice(NamedTuple):
    """The step `choose_step` picked.

    **Fields:** `h` (the step), `t_new` (where it ends: exactly the boundary when it reaches it),
    `reaches_boundary`, and `limited` (the step is shorter than error control asked for, so its
    size must not become the next step's ideal).
    """

    h: Array
    t_new: Array
    reaches_boundary: Array
    limited: Array


def choose_step(
    integrator: IntegratorBase,
    fixed: bool,
    t: Array,
    boundary: Array,
    h_try: Array,
    grid: Any,  # (t_boundary, steps since it) in fixed-step mode, else ()
    has_state: bool,
) -> StepChoice:
    """The step to attempt from ``t`` toward ``boundary`` (Drake's ``IntegrateAtMost``).

    Error-controlled: ``h_try``, unless the boundary is closer than 0.95 ``h_try`` (then the step is
    limited to it) or within 1.001 ``h_try`` (taken to it); a boundary within ``stretch_factor *
    max_step_size`` is reached in one step rather than leaving a sliver (e.g. 0.8 - 0.7 =
    0.10000000000000009 > 0.1). Fixed-step: steps of ``max_step_size`` on a grid from the last
    boundary ``grid = (t_boundary, steps since it)``, stretched onto a boundary within the stretch
    factor. Without continuous state time goes straight to the boundary.
    """
    max_step = integrator.max_step_size
    stretch = integrator.stretch_factor
    h_max = boundary - t
    if fixed:
        t_seg, n_seg = grid
        t_grid = t_seg + (n_seg + 1).astype(t.dtype) * max_step
        stretch_ok = boundary <= t_seg + (n_seg.astype(t.dtype) + stretch) * max_step
        h = jnp.where(stretch_ok, h_max, t_grid - t)
        # a retry after a sub-step failure (Newton did not converge) takes the halved step instead;
        # ``limited`` then tells the loop to restart the grid where that step ends (Drake's next step
        # is a full step from there)
        # (a retry's h_try is at most half the step that failed; otherwise h_try is the maximum step,
        # equal to h up to rounding and the stretch factor)
        limited = h_try < 0.75 * h
        h = jnp.where(limited, h_try, h)
    else:
        limited = h_max < 0.95 * h_try
        to_boundary = limited | (h_max < 1.001 * h_try)
        h = jnp.where(
            to_boundary & (h_max <= stretch * max_step),
            h_max,
            jnp.minimum(jnp.where(to_boundary, h_max, h_try), max_step),
        )
    if not has_state:
        h = h_max
        limited = jnp.array(True)
    h = jax.lax.optimization_barrier(jnp.maximum(h, 0.0))
    reaches_boundary = h >= h_max
    t_new = jnp.where(reaches_boundary, boundary, t + h)
    return StepChoice(h, t_new, reaches_boundary, limited)


class Verdict(NamedTuple):
    """What `error_control` decided about an attempted step.

    **Fields:** `accept`; `h_next` (the step error control asks for next); `at_minimum` (error control
    is pinned at the minimum step); `shrinkage` and `failure` (0/1: the step was shrunk by error
    control / by a sub-step failure); `status` (the run's status code after this step); `limited`
    (updated: a failed Newton iteration also limits the step).
    """

    accept: Array
    h_next: Array
    at_minimum: Array
    shrinkage: Array
    failure: Array
    status: Array
    limited: Array


def error_control(
    system: System,
    integrator: IntegratorBase,
    fixed: bool,
    has_state: bool,
    num_q: int,
    num_v: int,
    context_at_end: Callable[[], Context],
    t: Array,
    h: Array,
    x_new: Array,
    err: Array,
    ok: Array,
    h_try: Array,
    at_minimum: Array,
    status: Array,
    limited: Array,
) -> Verdict:
    """Accept or reject a step of size ``h`` from ``t`` that gave ``x_new`` with error estimate ``err``
    (``ok``: the method's own check, e.g. Newton convergence).

    Fixed-step mode accepts every finite step whose method succeeded and reports a non-finite one.
    Error control follows Drake's ``StepOnceErrorControlledAtMost``: the weighted norm of ``err``
    against the accuracy in use decides (a non-finite state gives a NaN norm, a failed step); wanting
    a step below the minimum sets the min-step status. In both modes a Newton failure halves the step
    (Drake's sub-step subdivision factor), down to the minimum step (then the Newton status).
    """
    i32 = jnp.int32
    zero = jnp.zeros((), i32)
    # Drake's working minimum, 1e-14 max(1, |t|), but never below what the time's dtype resolves (in
    # float32 a step of 1e-14 t would leave the time unchanged)
    resolution = max(1e-14, 4.0 * float(jnp.finfo(t.dtype).eps))
    floor = resolution * jnp.maximum(1.0, jnp.abs(t))
    working_min = jnp.maximum(integrator.requested_minimum_step_size, floor)
    # A step whose Newton iteration failed is retried with half the step (Drake's sub-step failure,
    # counted as a failure and a shrinkage), until the halved step would fall below the minimum: then
    # the run stops (Drake throws) with the Newton status. Without the throw option, the step may go
    # below the requested minimum, but not below what time resolves.
    h_half = 0.5 * h
    failed = ~ok & jnp.all(jnp.isfinite(x_new))
    too_small = h_half < floor
    if integrator.throw_on_minimum_step_size_violation:
        too_small = too_small | (h_half < working_min)
    newton_status = jnp.where(failed & too_small, STATUS_NEWTON_FAILED, status)
    if fixed:
        finite = jnp.all(jnp.isfinite(x_new))
        accept = finite & ok
        status = jnp.where(finite, newton_status, STATUS_NONFINITE)
        h_next = jnp.where(failed, h_half, integrator.max_step_size)
        return Verdict(accept, h_next, at_minimum, zero, failed.astype(i32), status, limited)
    # Step-size selection is not differentiated (as in Diffrax's controllers): a derivative through an
    # error-controlled run is that of the computed map with its step sizes held fixed, which converges
    # to the true sensitivity as the accuracy is tightened (differentiating the controller instead
    # adds d(step)/d(parameter) terms of the size of the local error, which do not)
    sg = jax.lax.stop_gradient
    err_norm = sg(state_change_norm(system, context_at_end, num_q, num_v, err, integrator))
    success, h_next, at_min, violation = adjust_step_size(integrator, err_norm, sg(h), at_minimum > 0, working_min)
    if not has_state:  # nothing to integrate: every step is accepted
        success, violation = jnp.array(True), jnp.array(False)
    violation = violation & ok
    # a step pinned at the minimum whose state or error estimate is still NaN/inf: the dynamics are
    # non-finite here, whatever the step (report that, not the step size)
    nonfinite = ~jnp.isfinite(err_norm) | ~jnp.all(jnp.isfinite(x_new))
    accept = success & ok & ~violation
    return Verdict(
        accept=accept,
        h_next=jnp.where(ok, h_next, h_half),
        at_minimum=at_min.astype(i32),
        shrinkage=(ok & ~success).astype(i32),
        failure=(~ok).astype(i32),
        status=jnp.where(violation, jnp.where(nonfinite, STATUS_NONFINITE, STATUS_MIN_STEP), newton_status),
        limited=limited | ~ok,
    )


def adjust_step_size(
    integrator: IntegratorBase, err: Array, h: Array, at_min: Array, working_min: Array
) -> tuple[Array, Array, Array, Array]:
    """Drake's ``CalcAdjustedStepSize``: returns (success, new step, at_min, min-step violation).

    Safety factor 0.9; shrink at least to 0.9 h and at most to 0.1 h; grow at most 5x and only by
    more than 1.2x; a step error control would shrink while pinned at the minimum succeeds.
    """
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
    # The maximum step caps the next step, but it must not reject a step that was stretched (by up to
    # the stretch factor) to land on a boundary: otherwise such a step is retried forever.
    new = jnp.minimum(new, jnp.maximum(integrator.max_step_size, h))
    # Drake's ValidateSmallerStepSize, on the step error control wants (before the minimum is applied):
    # a step below the working minimum (which includes the requested minimum) and below the step just
    # taken is a violation, also when the step taken was already the minimum (clamping first hid it:
    # a float32 run at h = h_min accepted steps of any error and reported ok).
    violation = (new < working_min) & (new < h) & integrator.throw_on_minimum_step_size_violation & ~early_success
    new = jnp.maximum(new, working_min)
    hit_min = new == working_min
    at_min = at_min | hit_min
    success = new >= h
    success = jnp.where(early_success, True, success)
    new = jnp.where(early_success, h, new)
    success = jnp.where(bad, False, success)
    new = jnp.where(bad, min_shrink * h, new)
    return success, jnp.minimum(new, integrator.max_step_size), at_min, violation


def state_change_norm(
    system: System, make_context: Callable[[], Context], nq: int, nv: int, dx: Array, integrator: IntegratorBase
) -> Array:
    """Drake's ``CalcStateChangeNorm``: weighted infinity norm over q (through N), v and z.

    ``make_context`` builds the context at the end of the step; it is only needed (and only called)
    when N(q) is not the identity.
    """
    if integrator.qbar_weight is None and integrator.z_weight is None and (nq == 0 or has_identity_maps(system)):
        # all weights one and N(q) = I: the weighted norm is the plain infinity norm (NaN propagates)
        return jnp.max(jnp.abs(dx)) if dx.shape[0] else jnp.zeros((), dx.dtype)
    dq, dv, dz = dx[:nq], dx[nq : nq + nv], dx[nq + nv :]
    parts = []
    wv = None if integrator.qbar_weight is None else jnp.asarray(integrator.qbar_weight, dx.dtype)
    wz = None if integrator.z_weight is None else jnp.asarray(integrator.z_weight, dx.dtype)
    if nv:
        parts.append(jnp.max(jnp.abs(dv if wv is None else wv * dv)))
    if nq:
        if wv is None and nq == nv and has_identity_maps(system):
            parts.append(jnp.max(jnp.abs(dq)))
        else:
            context = make_context()
            pinv = system.qdot_to_velocity(context, dq)
            wq = system.velocity_to_qdot(context, pinv if wv is None else wv * pinv)
            parts.append(jnp.max(jnp.abs(wq)))
    if dz.shape[0]:
        parts.append(jnp.max(jnp.abs(dz if wz is None else wz * dz)))
    if not parts:
        return jnp.zeros((), dx.dtype)
    out = parts[0]
    for p in parts[1:]:
        out = jnp.maximum(out, p)
    return jnp.where(jnp.any(jnp.isnan(dx)), jnp.nan, out)


def has_identity_maps(system: System) -> bool:
    """Whether every leaf of ``system`` keeps the default N(q) = I (qdot = v)."""
    if isinstance(system, Diagram):
        return all(has_identity_maps(s) for s in system.subsystems)
    if isinstance(system, LeafSystem):
        t = type(system)
        return (
            t.do_map_velocity_to_qdot is LeafSystem.do_map_velocity_to_qdot
            and t.do_map_qdot_to_velocity is LeafSystem.do_map_qdot_to_velocity
        )
    return False
