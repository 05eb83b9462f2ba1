"""Simulation: the pure, jit-able ``simulate`` and a Drake-style ``Simulator`` wrapper.

``simulate(system, context, t_final, integrator, save_at)`` integrates the continuous state of any
System or Diagram from ``context`` to ``t_final`` inside one compiled loop and returns a
:class:`SimulationResult` (final context, recorded values, Drake's integrator statistics, status).

* Fixed-step integration whose step count is known when tracing is a ``lax.scan``: exactly
  ``ceil((t_final - t0) / h)`` steps with time computed as ``t0 + n h`` (Drake accumulates time by
  addition and takes 10001 steps of 1e-3 to reach 10 s; jaxsys takes 10000).
* Error-controlled integration (and fixed steps whose count is only known at run time) is a while
  loop over step *attempts*, bounded by ``integrator.max_steps``. Evaluated, it is a plain
  ``lax.while_loop``; differentiated, ``equinox.internal.while_loop(kind="bounded")`` with the same
  body (a ``custom_jvp`` chooses): ``jit``, ``vmap``, ``jvp``/``jacfwd`` and ``grad``/``jacrev`` all
  work in the same default configuration, and evaluation does not pay for the bounded loop's nested
  scans. Each attempt follows Drake's
  ``IntegratorBase::StepOnceErrorControlledAtMost`` and ``CalcAdjustedStepSize`` (safety 0.9,
  shrink at least to 0.9 h and at most to 0.1 h, grow at most 5x and only by more than 1.2x,
  the 0.95 / 1.001 rules for steps limited by a boundary), with Drake's weighted infinity norm
  of the error estimate.
* ``save_at`` times are boundaries the integrator steps to exactly (as Drake's ``AdvanceTo`` does);
  the values recorded there are exact, not interpolated (or, with ``dense_output=True``,
  interpolated from the steps, which then do not depend on the save times). Recording happens in an
  outer loop over the save times, so the stepping loop carries only small arrays (XLA's CPU runtime
  runs such loop bodies about twice as fast).
* Problems are never silent: exceeding ``max_steps``, a step below the minimum, or a non-finite
  state sets ``result.status``; with ``throw=True`` (default) an error is raised
  (``equinox.error_if``, so it works inside ``jit``).
"""

from __future__ import annotations

import functools
import time as _time
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context
from ..framework.errors import JaxsysError
from ..framework.events import DISCRETE_UPDATE, PUBLISH, UNRESTRICTED_UPDATE, TriggerType
from ..framework.system import System
from .event_loop import EventProgram, PublishLog, advance_pending_events, get_rest, isolate_crossing, set_rest
from .integrators import IntegratorBase, RungeKutta3Integrator
from .progress import AbstractProgressMeter, NoProgressMeter


Array = jax.Array

ROLLED_STAGES_MIN_LEAVES = 16
DENSE_WINDOW = 8  # with dense output, save times interpolated per pass of the saving loop
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


class _Raw(NamedTuple):
    """What a stepping loop returns; ``simulate`` checks it and builds the SimulationResult."""

    t: Array
    x: Array
    ys: Any
    stats: IntegratorStatistics
    status: Array
    rest: Any = None  # discrete and abstract state, for systems with events
    logs: Any = ()
    counts: Any = None  # [publishes, discrete updates, unrestricted updates]


class SimulatorStatistics(eqx.Module):
    """Drake's simulator statistics: steps, and how many times each kind of event was dispatched
    (simultaneous events of one kind count once, as in Drake)."""

    num_steps_taken: Array
    num_publishes: Array
    num_discrete_updates: Array
    num_unrestricted_updates: Array

    def as_dict(self) -> dict[str, int]:
        """Plain Python numbers."""
        return {k: int(np.asarray(getattr(self, k))) for k in self.__dataclass_fields__}


class SimulationResult(eqx.Module):
    """The result of :func:`simulate`.

    **Fields:**
    - `context`: the final context (time ``t_final``).
    - `ts`: the ``save_at`` times, shape ``(n,)``.
    - `ys`: the recorded values at ``ts`` (the ``record`` function's pytree with a leading axis n).
    - `stats`: :class:`IntegratorStatistics`.
    - `status`: 0 ok; else a code of :data:`STATUS_MESSAGES`.
    - `publish_logs`: one :class:`PublishLog` per per-step or periodic publish event, in the order
      of ``system``'s events (use :meth:`get_publish_log`).
    - `simulator_stats`: Drake's simulator statistics (steps, publishes, updates).
    - `initialization_publishes`: the values recorded by initialization publish events.
    """

    def get_publish_log(self, event: Any) -> PublishLog:
        """The log of one publish event (an Event, or its name)."""
        for log in self.publish_logs:
            if (log.name == event) if isinstance(event, str) else (log.event_uid == event.uid):
                return log
        raise JaxsysError(
            f"No publish log for {event!r}; logs are kept for per-step and periodic publish events: "
            f"{[log.name for log in self.publish_logs]}."
        )

    context: Context
    ts: Array
    ys: Any
    stats: IntegratorStatistics
    status: Array
    publish_logs: tuple[PublishLog, ...] = ()
    simulator_stats: SimulatorStatistics | None = None
    initialization_publishes: Any = ()

    def message(self) -> str:
        """The status as text (for a concrete, unbatched result)."""
        return STATUS_MESSAGES[int(self.status)]


def _default_record(context: Context) -> Array:
    return context.get_continuous_state_vector()


def _state_norm(
    system: System, make_context: Callable[[], Context], nq: int, nv: int, dx: Array, integrator: IntegratorBase
) -> Array:
    """Drake's ``CalcStateChangeNorm``: weighted infinity norm over q (through N), v and z.

    ``make_context`` builds the context at the end of the step; it is only needed (and only called)
    when N(q) is not the identity.
    """
    if integrator.qbar_weight is None and integrator.z_weight is None and (nq == 0 or _has_identity_maps(system)):
        # all weights one and N(q) = I: the weighted norm is the plain infinity norm (NaN propagates)
        return jnp.max(jnp.abs(dx)) if dx.shape[0] else jnp.zeros((), dx.dtype)
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
            context = make_context()
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
    """``x`` as a float64 NumPy array if its value is known while tracing, else None."""
    if isinstance(x, jax.core.Tracer):
        return None
    try:
        return np.asarray(x, dtype=np.float64).reshape(-1) if np.ndim(x) else np.asarray(x, dtype=np.float64)
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
    start_time: float | None = None,
    progress_meter: AbstractProgressMeter | None = None,
    initialize: bool = True,
    updates_at_start: bool = True,
    log_capacity: int = 10_000,
    witness_iterations: int = 40,
    loop: str = "bounded",
    checkpoints: int | None = None,
    dense_output: bool = False,
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
    - `initialize`: run initialization events first, and publishes due at the start (Drake's
      ``Simulator::Initialize``). Pass False to continue from the final context of an earlier run.
    - `updates_at_start`: perform the updates due exactly at the start time (Drake does, in the
      first step). False after :func:`advance_pending_events` already did them.
    - `log_capacity`: records kept per per-step publish event (periodic publish logs are sized
      from their period and the horizon when those are known while tracing).
    - `witness_iterations`: precision of witness isolation: the state lands (step size) *
      2**-witness_iterations past the crossing found by regula falsi on trial steps (default 40:
      ~1e-12 of the step), or at the first of a few wider margins where the witness has triggered.
    - `loop`: how the variable-length (error-controlled or event-driven) loop is built:
      ``"bounded"`` (default: ``jit``, ``vmap``, ``jvp``/``jacfwd`` and ``grad`` all work; evaluated
      without differentiation it runs as a plain ``lax.while_loop``) or
      ``"checkpointed"`` (reverse mode keeps only ``checkpoints`` saved states, recomputing the rest:
      for very long horizons whose ``grad`` would not fit in memory; forward-mode ``jvp``/``jacfwd``
      is not available with it). Fixed-step runs with a static step count are a ``lax.scan`` either way.
    - `checkpoints`: for ``loop="checkpointed"`` (default: equinox's, about log(max_steps)).
    - `dense_output`: record ``save_at`` values from the integrator's continuous extension of each
      step (Dormand-Prince: its 4th-order interpolant; other explicit Runge-Kutta methods: cubic
      Hermite) instead of truncating steps to land on them (the default, as Drake's ``AdvanceTo``
      does). The step sequence then does not depend on the save times. Explicit Runge-Kutta
      integrators, systems without events.
    - `progress_meter`: e.g. ``TqdmProgressMeter()`` for a progress bar of simulated time (default
      none; see :mod:`jaxsys.analysis.progress`).
    - `start_time`: only for fixed-step runs whose context time is traced (under ``jit``/``vmap``):
      the start time the static step plan (a ``lax.scan`` of known length) assumes. Default 0.0;
      a context that starts elsewhere raises an error instead of giving wrong times.

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
        c_ts = _concrete(save_at)
        c_tf = _concrete(t_final)
        if c_ts is not None and c_ts.size > 1 and np.any(np.diff(c_ts) <= 0):
            raise JaxsysError("simulate: save_at must be strictly increasing.")
        if c_ts is not None and c_tf is not None and c_ts.size and c_ts[-1] > c_tf * (1 + 1e-12) + 1e-15:
            raise JaxsysError(f"simulate: save_at goes past t_final ({c_ts[-1]} > {c_tf}).")
    c_t0, c_tf = _concrete(t0), _concrete(t_final)
    if c_t0 is not None and c_tf is not None and c_tf < c_t0:
        raise JaxsysError(
            f"simulate: t_final={float(c_tf)} is before the context's time {float(c_t0)} (Drake: "
            f"'boundary_time >= context->get_time()' failed)."
        )

    if dense_output and not integrator.supports_dense_output():
        raise JaxsysError(
            f"simulate: dense_output=True needs an integrator with a continuous extension (the explicit "
            f"Runge-Kutta ones); {type(integrator).__name__} has none. Leave dense_output off: save_at "
            f"times are then reached by stepping to them."
        )
    if loop not in ("bounded", "checkpointed"):
        raise JaxsysError(f"simulate: loop must be 'bounded' or 'checkpointed'; got {loop!r}.")
    program = EventProgram(system)
    if dense_output and program:
        raise JaxsysError(
            f"simulate: dense_output=True is not available for systems with events or witness functions "
            f"(System {system.get_system_id_string()} has some): an event changes the state within the step "
            f"the interpolant spans. Leave dense_output off: save_at times are then reached by stepping."
        )
    init_values: Any = ()
    events = None
    if program:
        if initialize:
            context, init_values = program.initialize(context)
        program.bind_witnesses(context)
        k0 = program.init_counters(t0, updates_at_start, publishes_at_start=initialize)
        logs0 = program.allocate_logs(context, program.capacities(c_t0, c_tf, log_capacity))
        n_p0 = jnp.zeros((), jnp.int32)
        if initialize:
            # per-step publishes and periodic publishes due at the start time belong to Initialize
            k0, logs0, n_p0 = program.publishes(context, k0, jnp.array(True), logs0)
            n_p0 = n_p0 + int(bool(program.by[(TriggerType.INITIALIZATION, PUBLISH)]))
        n_init_d = int(bool(initialize and program.by[(TriggerType.INITIALIZATION, DISCRETE_UPDATE)]))
        n_init_u = int(bool(initialize and program.by[(TriggerType.INITIALIZATION, UNRESTRICTED_UPDATE)]))
        counts0 = jnp.stack([n_p0, jnp.asarray(n_init_d, jnp.int32), jnp.asarray(n_init_u, jnp.int32)])
        events = (program, k0, logs0, get_rest(context), counts0)

    cs = context.get_continuous_state()
    x0 = cs.x

    def ctx_at(t: Array, x: Array) -> Context:
        return context.with_time(t).with_continuous_state(x)

    f = system._derivative_function(context)

    aux = {
        "num_q": cs.num_q,
        "num_v": cs.num_v,
        "v_to_qdot": lambda t, x, v: system._map_raw(ctx_at(t, x), v, "v_to_qdot"),
        # Large diagrams: evaluate RK stages in a loop so the dynamics are traced and compiled once.
        "rolled": context._num_leaves() > ROLLED_STAGES_MIN_LEAVES,
    }

    progress = progress_meter if progress_meter is not None else NoProgressMeter()
    progress_token = progress.start(t0, t_final_arr)
    aux["progress"] = (progress, progress_token)
    fixed = integrator.get_fixed_step_mode()
    plan = None
    t0_plan = float(c_t0) if c_t0 is not None else float(start_time or 0.0)
    events_fit_scan = not program or (not program.witnesses and program.aligned(t0_plan, integrator.max_step_size))
    if fixed and events_fit_scan:
        plan = _plan_fixed_steps(
            integrator.max_step_size, t0_plan, c_tf, np.zeros(0) if save_at is None else _concrete(save_at)
        )
    run = _Run(system, context, integrator, f, aux, record, x0, t0, t_final_arr, ts)
    if plan is not None:
        n_fixed, save_idx, exact = plan
        scan_events = events + (updates_at_start,) if program else None
        raw = _simulate_scan(run, n_fixed, save_idx, exact, scan_events)
    else:
        raw = _simulate_while(run, fixed, events, witness_iterations, loop, checkpoints, dense_output)
    progress.close(progress_token, raw.t)
    # Checks are attached to the few arrays a caller uses (final state, recorded values, status),
    # not to the whole context: a diagram's context has arrays for every leaf.
    checked = (raw.t, raw.x, raw.ys, raw.status)
    if plan is not None and c_t0 is None:
        # The static step plan assumed a start time; a traced context must really start there.
        checked = eqx.error_if(
            checked,
            jnp.any(t0 != t0_plan),
            f"simulate: this fixed-step run was compiled for a start time of {t0_plan} s (the context's time "
            f"is traced, so the step count was planned from start_time); the context starts elsewhere. Pass "
            f"start_time=<the context's time> to simulate.",
        )
    if throw:
        checked = eqx.branched_error_if(
            checked,
            raw.status != STATUS_OK,
            raw.status,
            [STATUS_MESSAGES[i] for i in range(len(STATUS_MESSAGES))],
        )
    t_end, x_end, ys, status = checked
    final = context.with_time(t_end).with_continuous_state(x_end)
    if program:
        final = set_rest(final, raw.rest)
        counts = raw.counts
        sim_stats = SimulatorStatistics(raw.stats.num_steps_taken, counts[0], counts[1], counts[2])
    else:
        zero = jnp.zeros((), jnp.int32)
        sim_stats = SimulatorStatistics(raw.stats.num_steps_taken, zero, zero, zero)
    return SimulationResult(final, ts, ys, raw.stats, status, tuple(raw.logs), sim_stats, init_values)


class _Run(NamedTuple):
    """What both loops (scan and while) need from :func:`simulate`."""

    system: System
    context: Context
    integrator: IntegratorBase
    f: Callable[..., Array]
    aux: Any
    record: Callable[[Context], Any]
    x0: Array
    t0: Array
    t_final: Array
    ts: Array


def _plan_fixed_steps(
    h: float, t0: float, t_final: Any, ts: np.ndarray | None
) -> tuple[int, np.ndarray | None, bool] | None:
    """Static plan of a fixed-step run: (number of steps, step index of each save time), or None when
    the run cannot be a scan (t_final or the save times only known at run time, or save times off
    the step grid)."""
    if t_final is None or ts is None:
        return None
    span = float(t_final) - t0
    n = max(int(np.ceil(span / h - 1e-9)), 0)
    exact = abs(t0 + n * h - float(t_final)) <= 1e-9 * h
    if ts.size == 0:
        return n, None, exact
    idx = np.rint((ts - t0) / h).astype(np.int64)
    scale = max(1.0, abs(float(t_final)))
    at_end = np.abs(ts - float(t_final)) <= 1e-12 * scale
    on_grid = np.abs(t0 + idx * h - ts) <= 1e-9 * scale
    if not np.all(on_grid | at_end):
        return None
    idx = np.where(at_end, n, np.minimum(idx, n))
    return n, idx, exact


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
    run: _Run,
    n_steps: int,
    save_idx: np.ndarray | None,
    exact: bool,
    events: Any = None,
) -> _Raw:
    """Fixed steps as ``lax.scan``. ``exact``: the span is a whole number of steps, so every step
    has the constant size h (a Python float XLA can fold); otherwise the last step is shortened.

    With ``events`` (only when every periodic event time lies on the step grid and there are no
    witnesses), each scan iteration is one Drake step: updates, the step, publishes.
    """
    system, context, integrator, f, aux, record, x0, t0, t_final, ts = run
    dtype = t0.dtype
    h = float(integrator.max_step_size)
    n_save = int(ts.shape[0])
    program = events[0] if events is not None else None
    updates_at_start = events[5] if events is not None else True
    # first same as last (without events): the carry holds the derivative at the current state
    fsal = integrator.uses_fsal() and not program

    meter, token = aux["progress"]

    def ctx_of(t: Array, carry: Any) -> Context:
        x, evc = carry
        ctx = context.with_time(t).with_continuous_state(x)
        return set_rest(ctx, evc[0]) if program else ctx

    def step(carry: Any, n: Array) -> Any:
        x, evc = carry
        t = t0 + n.astype(dtype) * h
        meter.update(token, t, n)
        if exact:
            hn: Any = h
            t_next = t0 + (n + 1).astype(dtype) * h
        else:
            t_next = jnp.where(n + 1 == n_steps, t_final, t0 + (n + 1).astype(dtype) * h)
            hn = t_next - t
        if fsal:
            x_new, _, _, k_end = integrator.attempt_step_fsal(f, t, x, hn, aux, evc, t_next)
            return (x_new, k_end)
        if not program:
            return (integrator.attempt_step(f, t, x, hn, aux)[0], evc)
        rest, k_ev, logs, counts = evc
        base = set_rest(context.with_time(t).with_continuous_state(x), rest)
        gate = (n > 0) | updates_at_start
        base, k_ev, n_u, n_d = program.updates(base, k_ev, gate)
        rest = get_rest(base)
        aux_cur = dict(aux)
        aux_cur["v_to_qdot"] = lambda tt, xx, v: system._map_raw(
            base.with_time(tt).with_continuous_state(xx), v, "v_to_qdot"
        )
        x_new = integrator.attempt_step(
            system._derivative_function(base), t, base.get_continuous_state_vector(), hn, aux_cur
        )[0]
        after = set_rest(context.with_time(t_next).with_continuous_state(x_new), rest)
        k_ev, logs, n_p = program.publishes(after, k_ev, jnp.array(True), logs)
        return (x_new, (rest, k_ev, logs, counts + jnp.stack([n_p, n_d, n_u])))

    def time_after(n: Array) -> Array:  # time after n steps
        return jnp.where(n == n_steps, t_final, t0 + n.astype(dtype) * h)

    def rec(n: Array, carry: Any) -> Any:
        return record(ctx_of(time_after(n), carry))

    def run(carry: Any, start: Any, length: int) -> Any:
        if length <= 0:
            return carry
        return jax.lax.scan(lambda c, n: (step(c, n), None), carry, start + jnp.arange(length, dtype=jnp.int32))[0]

    carry0 = (x0, (events[3], events[1], events[2], events[4]) if program else (f(t0, x0) if fsal else ()))
    idx = save_idx if save_idx is not None else np.zeros(0, np.int64)
    m = int(idx[0]) if idx.size else 0
    if n_save == 0:
        carry = run(carry0, 0, n_steps)
        buf = _record_buffer(record, context, 0)
    elif m > 0 and np.array_equal(idx, m * np.arange(1, n_save + 1)):
        # Save times on a regular grid: an outer scan over save intervals of an inner scan of plain
        # steps, recording once per interval (no per-step masked writes).
        def interval(carry: Any, j: Array) -> tuple[Any, Any]:
            carry = run(carry, j * m, m)
            return carry, rec((j + 1) * m, carry)

        carry, buf = jax.lax.scan(interval, carry0, jnp.arange(n_save, dtype=jnp.int32))
        carry = run(carry, n_save * m, n_steps - n_save * m)
    else:
        # General grid-aligned save times: one pass, a masked write at the steps that hit one.
        buf = _record_buffer(record, context, n_save)
        k0 = int(np.sum(idx == 0))
        if k0:
            buf = jax.tree_util.tree_map(lambda b, v: b.at[:k0].set(v), buf, record(context))
        idx_ = jnp.asarray(idx, jnp.int32)

        def step_rec(c: Any, n: Array) -> Any:
            carry, k, buf = c
            carry = step(carry, n)
            hit = (k < n_save) & (idx_[jnp.clip(k, 0, n_save - 1)] == n + 1)
            buf = _write(buf, k, rec(n + 1, carry), hit)
            return (carry, k + hit.astype(k.dtype), buf), None

        init = (carry0, jnp.asarray(k0, jnp.int32), buf)
        (carry, _, buf), _ = jax.lax.scan(step_rec, init, jnp.arange(n_steps, dtype=jnp.int32))
    x, evc = carry
    ok = jnp.all(jnp.isfinite(x))
    n = jnp.asarray(n_steps, jnp.int32)
    last_h = (t_final - (t0 + (n_steps - 1) * h)) if n_steps else jnp.zeros((), dtype)
    stats = _statistics(
        steps=n,
        attempts=n,
        evals=n * (integrator.num_evaluations() - int(fsal)) + int(fsal and n_steps > 0),
        shrink_err=jnp.zeros((), jnp.int32),
        substep_fail=jnp.zeros((), jnp.int32),
        smallest=jnp.full((), jnp.nan, dtype),
        largest=jnp.asarray(h if n_steps > 1 else last_h, dtype),
        initial=jnp.minimum(h, t_final - t0) if n_steps else jnp.full((), jnp.nan, dtype),
        previous=jnp.asarray(last_h, dtype),
    )
    status = jnp.where(ok, STATUS_OK, STATUS_NONFINITE).astype(jnp.int32)
    if program:
        rest, _, logs, counts = evc
        return _Raw(t_final, x, buf, stats, status, rest, logs, counts)
    return _Raw(t_final, x, buf, stats, status)


def _statistics(**v: Array) -> IntegratorStatistics:
    """IntegratorStatistics from the loop's short names."""
    return IntegratorStatistics(
        num_steps_taken=v["steps"],
        num_derivative_evaluations=v["evals"],
        num_step_shrinkages_from_error_control=v["shrink_err"],
        num_substep_failures=v["substep_fail"],
        num_step_shrinkages_from_substep_failures=v["substep_fail"],
        smallest_adapted_step_size_taken=v["smallest"],
        largest_step_size_taken=v["largest"],
        actual_initial_step_size_taken=v["initial"],
        previous_integration_step_size=v["previous"],
        num_step_attempts=v["attempts"],
    )


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
    # The maximum step caps the next step, but it must not reject a step that was stretched (by up to
    # the stretch factor) to land on a boundary: otherwise such a step is retried forever.
    new = jnp.minimum(new, jnp.maximum(integrator.max_step_size, h))
    new = jnp.maximum(new, working_min)
    hit_min = new == working_min
    violation = hit_min & (new < h) & integrator.throw_on_minimum_step_size_violation & ~early_success
    at_min = at_min | hit_min
    success = new >= h
    success = jnp.where(early_success, True, success)
    new = jnp.where(early_success, h, new)
    success = jnp.where(bad, False, success)
    new = jnp.where(bad, min_shrink * h, new)
    return success, jnp.minimum(new, integrator.max_step_size), at_min, violation


# Packed loop counters (one int vector and one float vector keep the loop carry small: every
# carried array costs time in the bounded while loop).
_I_STEPS, _I_ATTEMPTS, _I_SHRINK, _I_FAIL, _I_STATUS, _I_ATMIN, _I_KEVALS = range(7)
_F_SMALLEST, _F_LARGEST, _F_INITIAL, _F_PREVIOUS, _F_HTRY, _F_HIDEAL, _F_T = range(7)


def _while_fast_primal(cond: Any, body: Any, init: Any, max_steps: int) -> Any:
    """A while loop that runs as a plain ``lax.while_loop`` when it is evaluated, and as equinox's
    bounded loop (forward- and reverse-mode differentiable) when it is differentiated.

    The bounded loop nests ``log_16(max_steps)`` scans of conditionals: it costs ~25% more per
    step and a fixed price at every entry (small loops entered often, as between save times, pay
    it many times). A ``custom_jvp`` keeps the fast loop for evaluation, ``vmap`` included, and uses
    the bounded loop's JVP (and hence its transpose for ``grad``) for derivatives: both loops run the
    same body, so values are identical. Closed-over arrays become explicit arguments
    (``jax.closure_convert``) so that derivatives with respect to them are seen.
    """
    body_c, body_consts = jax.closure_convert(body, init)
    cond_c, cond_consts = jax.closure_convert(cond, init)

    def bounded(c0: Any, bc: Any, cc: Any) -> Any:
        return eqxi.while_loop(
            lambda c: cond_c(c, *cc), lambda c: body_c(c, *bc), c0, max_steps=max_steps, kind="bounded"
        )

    @jax.custom_jvp
    def run(c0: Any, bc: Any, cc: Any) -> Any:
        # (the body's own condition bounds the attempts: no extra step counter)
        return jax.lax.while_loop(lambda c: cond_c(c, *cc), lambda c: body_c(c, *bc), c0)

    @run.defjvp
    def run_jvp(primals: Any, tangents: Any) -> Any:
        return jax.jvp(bounded, primals, tangents)

    return run(init, tuple(body_consts), tuple(cond_consts))


def _simulate_while(
    run: _Run,
    fixed: bool,
    events: Any = None,
    witness_iterations: int = 40,
    loop: str = "bounded",
    checkpoints: int | None = None,
    dense: bool = False,
) -> _Raw:
    """Step attempts in an ``equinox.internal.while_loop`` of kind ``loop`` (see the module docstring)."""
    system, context, integrator, f, aux, record, x0, t0, t_final, ts = run
    dtype = t0.dtype
    n_save = int(ts.shape[0])
    i32 = jnp.int32
    max_step = integrator.max_step_size
    stretch = integrator.stretch_factor
    nan = jnp.nan
    h0 = integrator.get_initial_step_size_target()

    if n_save:
        buf = _record_buffer(record, context, n_save)
        hit0 = ts <= t0
        first = record(context)
        buf = jax.tree_util.tree_map(
            lambda b, v: jnp.where(hit0.reshape((-1,) + (1,) * (b.ndim - 1)), v, b), buf, first
        )
        save0 = (jnp.sum(hit0).astype(i32), buf)
    else:
        save0 = ()
    seg = (t0, jnp.zeros((), i32)) if fixed else ()  # fixed mode: last boundary and steps since it
    program = events[0] if events is not None else None
    # events: (discrete/abstract state, periodic counters, publish logs, step open?, [publishes,
    # discrete updates, unrestricted updates])
    evc = (events[3], events[1], events[2], jnp.array(False), events[4], program.no_witness_flags()) if program else ()
    # First same as last: the derivative at the current (t, x), and whether it is still valid (events
    # that change the state or the dynamics invalidate it). Without events it is always valid.
    fsal = integrator.uses_fsal()
    ic0 = jnp.zeros(7, i32)
    if fsal and program:
        fk = (jnp.zeros_like(x0), jnp.array(False))
    elif fsal:
        fk = (f(t0, x0), jnp.array(True))
        ic0 = ic0.at[_I_KEVALS].set(1)
    else:
        fk = ()
    # time travels in the step-size vector: one kernel a step attempt fewer (vectors of at most 8
    # scalars are built by one fused kernel on CPU; longer ones are not)
    # dense output: the last accepted step (t, h, x, x_new, interpolation data), from which the
    # save times it spans are interpolated
    dense_data = ()
    if dense:
        _, _, _, _, dd_k = jax.eval_shape(
            lambda: integrator.attempt_step_dense(f, t0, x0, jnp.asarray(h0, dtype), aux, fk[0] if fsal else None, t0)
        )
        dense_data = (t0, jnp.zeros((), dtype), x0, x0, jnp.zeros(dd_k.shape, dd_k.dtype))
    # time travels in the step-size vector: one kernel a step attempt fewer (vectors of at most 8
    # scalars are built by one fused kernel on CPU; longer ones are not)
    init = (
        (),
        x0,
        ic0,
        jnp.stack([jnp.asarray(v, dtype) for v in (nan, 0.0, nan, nan, h0, h0)] + [t0]),
        seg,
        (evc, fk),
        dense_data,
    )
    # cubic Hermite output needs f at the end point, which only first-same-as-last methods have
    hermite_extra = int(dense and getattr(integrator, "dense", None) is None and not fsal)
    window = min(DENSE_WINDOW, n_save)  # dense output: save times served per pass of the outer loop
    max_attempts = integrator.max_steps

    def running(c: Any) -> Array:
        ic = c[2]
        return (ic[_I_STATUS] == STATUS_OK) & (ic[_I_ATTEMPTS] < max_attempts)

    meter, token = aux["progress"]

    def make_body(target: Array) -> Callable[[Any], Any]:
        # Steps toward `target` (a save time or t_final). Stepping to save times (Drake's AdvanceTo),
        # the target is a boundary that a step lands on; with dense output it is not: the loop stops
        # after the step that passes it.
        return functools.partial(body, target if not dense else t_final)

    def body(target: Array, c: Any) -> Any:
        _, x, ic, fs, seg, (evc, fk), dd = c
        t = fs[_F_T]
        meter.update(token, t, ic[_I_ATTEMPTS])
        k_evals = jnp.zeros((), i32)
        boundary = jnp.minimum(target, t_final)
        if program:
            # start of a Drake step (once per step, not per attempt): unrestricted then discrete updates
            rest, k_ev, logs, step_open, counts, w_pending = evc
            base = set_rest(context.with_time(t).with_continuous_state(x), rest)
            base, k_ev, n_u, n_d = program.updates(base, k_ev, ~step_open, w_pending)
            w_pending = w_pending & step_open  # consumed by this step's updates
            x = base.get_continuous_state_vector()
            rest = get_rest(base)
            f_cur = system._derivative_function(base)
            aux_cur = dict(aux)
            aux_cur["v_to_qdot"] = lambda tt, xx, v: system._map_raw(
                base.with_time(tt).with_continuous_state(xx), v, "v_to_qdot"
            )

            def make_ctx(tt: Array, xx: Array) -> Context:
                return set_rest(context.with_time(tt).with_continuous_state(xx), rest)

            # a step never jumps over a periodic event: it is truncated to land on it
            boundary = jnp.minimum(boundary, program.next_event_time(k_ev, dtype))
        else:
            f_cur, aux_cur = f, aux

            def make_ctx(tt: Array, xx: Array) -> Context:
                return context.with_time(tt).with_continuous_state(xx)

        h_max = boundary - t
        if fixed:
            t_seg, n_seg = seg
            t_grid = t_seg + (n_seg + 1).astype(dtype) * max_step
            stretch_ok = boundary <= t_seg + (n_seg.astype(dtype) + stretch) * max_step
            h = jnp.where(stretch_ok, h_max, t_grid - t)
            limited = jnp.array(False)
        else:
            h_att = fs[_F_HTRY]
            limited = h_max < 0.95 * h_att
            to_boundary = limited | (h_max < 1.001 * h_att)
            # Drake's stretch rule: a boundary within stretch_factor * max_step is reached in one
            # step rather than leaving a sliver (e.g. 0.8 - 0.7 = 0.10000000000000009 > 0.1)
            h = jnp.where(
                to_boundary & (h_max <= stretch * max_step),
                h_max,
                jnp.minimum(jnp.where(to_boundary, h_max, h_att), max_step),
            )
        if x0.shape[0] == 0:
            h = h_max  # no continuous state: time goes straight to the next boundary
            limited = jnp.array(True)
        h = jax.lax.optimization_barrier(jnp.maximum(h, 0.0))
        reaches_boundary = h >= h_max
        t_new = jnp.where(reaches_boundary, boundary, t + h)
        if fsal:
            k1, k_valid = fk
            if program:
                # updates at the start of this step change the state or the dynamics
                k_valid = k_valid & (n_u + n_d == 0)
                k1 = jax.lax.cond(k_valid, lambda: k1, lambda: f_cur(t, x))
                k_evals = (~k_valid).astype(i32)
            if dense:
                x_new, err, ok, k_end, interp_data = integrator.attempt_step_dense(f_cur, t, x, h, aux_cur, k1, t_new)
            else:
                x_new, err, ok, k_end = integrator.attempt_step_fsal(f_cur, t, x, h, aux_cur, k1, t_new)
        elif dense:
            x_new, err, ok, _, interp_data = integrator.attempt_step_dense(f_cur, t, x, h, aux_cur, None, t_new)
        else:
            x_new, err, ok = integrator.attempt_step(f_cur, t, x, h, aux_cur)
        if fixed:
            accept = jnp.all(jnp.isfinite(x_new)) & ok
            status = jnp.where(accept, ic[_I_STATUS], STATUS_NONFINITE)
            h_next = fs[_F_HTRY]
            at_min = ic[_I_ATMIN]
            shrink = fail = jnp.zeros((), i32)
        else:
            working_min = jnp.maximum(integrator.requested_minimum_step_size, 1e-14 * jnp.maximum(1.0, jnp.abs(t)))
            # A non-finite x_new gives a NaN error norm, which error control treats as a failed step.
            err_norm = _state_norm(
                system,
                lambda: make_ctx(t_new, x_new),
                aux["num_q"],
                aux["num_v"],
                err,
                integrator,
            )
            success, h_next, at_min_b, violation = _adjust_step(integrator, err_norm, h, ic[_I_ATMIN] > 0, working_min)
            if x0.shape[0] == 0:  # nothing to integrate: every step is accepted
                success, violation = jnp.array(True), jnp.array(False)
            # a Newton failure is a sub-step failure: halve the step (Drake's subdivision factor)
            violation = violation & ok
            accept = success & ok & ~violation
            h_next = jnp.where(ok, h_next, 0.5 * h)
            limited = limited | ~ok
            fail = (~ok).astype(i32)
            shrink = (ok & ~success).astype(i32)
            status = jnp.where(violation, STATUS_MIN_STEP, ic[_I_STATUS])
            at_min = at_min_b.astype(i32)
        if program and program.witnesses:
            # a witness that changes sign (in its direction) over the step: isolate the first crossing
            w0 = program.witness_values(make_ctx(t, x))
            w1 = program.witness_values(make_ctx(t_new, x_new))
            trig = program.triggered(w0, w1) & accept
            isolated = jnp.any(trig)
            t_new, x_new, w_now = jax.lax.cond(
                isolated,
                lambda: isolate_crossing(
                    program, integrator, f_cur, aux_cur, make_ctx, t, x, h, w0, w1, witness_iterations
                ),
                lambda: (t_new, x_new, trig),
            )
            w_now = w_now & accept
            reaches_boundary = reaches_boundary & ~isolated
            limited = limited | isolated
        else:
            isolated = jnp.array(False)
            w_now = program.no_witness_flags() if program else None
        acc_i = accept.astype(i32)
        ic = jnp.stack(
            [
                ic[_I_STEPS] + acc_i,
                ic[_I_ATTEMPTS] + 1,
                ic[_I_SHRINK] + shrink,
                ic[_I_FAIL] + fail,
                status.astype(i32),
                at_min.astype(i32),
                ic[_I_KEVALS] + k_evals,
            ]
        )
        smallest = fs[_F_SMALLEST]
        if not fixed:
            smallest = jnp.where(accept & (jnp.isnan(smallest) | ((h < smallest) & (h < h_max))), h, smallest)
        h_ideal = jnp.where(accept & ~limited, h_next, fs[_F_HIDEAL])
        fs = jnp.stack(
            [
                smallest,
                jnp.where(accept, jnp.maximum(fs[_F_LARGEST], h), fs[_F_LARGEST]),
                jnp.where(accept & jnp.isnan(fs[_F_INITIAL]), h, fs[_F_INITIAL]),
                jnp.where(accept, h, fs[_F_PREVIOUS]),
                jnp.where(accept, h_ideal, h_next),
                h_ideal,
                jnp.where(accept, t_new, t),
            ]
        )
        t_acc = fs[_F_T]
        x_acc = jnp.where(accept, x_new, x)
        if dense:
            dd = jax.tree_util.tree_map(lambda a, b: jnp.where(accept, a, b), (t, h, x, x_new, interp_data), dd)
        if fixed:
            at_b = accept & (reaches_boundary | isolated)  # fixed steps restart from a witness time
            seg = (jnp.where(at_b, t_new, seg[0]), jnp.where(at_b, 0, seg[1] + acc_i))
        if program:
            # end of the step: publishes at the new time (witness publishes included)
            k_ev, logs, n_p = program.publishes(make_ctx(t_acc, x_acc), k_ev, accept, logs, w_now)
            counts = counts + jnp.stack([n_p, n_d, n_u])
            w_pending = jnp.where(accept, w_now, w_pending)  # their updates start the next step
            evc = (rest, k_ev, logs, ~accept, counts, w_pending)
        if fsal:
            # the end-point derivative starts the next step; a rejected step keeps the start's;
            # a step cut short at a witness crossing has neither
            fk = (jnp.where(accept, k_end, k1), ~(accept & isolated))
        return ((), x_acc, ic, fs, seg, (evc, fk), dd)

    def while_loop(cond: Any, body_fn: Any, init_val: Any, max_steps: int, buffers: Any = None) -> Any:
        if loop == "bounded" and buffers is None:
            return _while_fast_primal(cond, body_fn, init_val, max_steps)
        if loop == "checkpointed":
            return eqxi.while_loop(
                cond,
                body_fn,
                init_val,
                max_steps=max_steps,
                kind="checkpointed",
                checkpoints=checkpoints,
                buffers=buffers,
            )
        return eqxi.while_loop(cond, body_fn, init_val, max_steps=max_steps, kind="bounded", buffers=buffers)

    def advance(c: Any, target: Array) -> Any:
        """Step until time reaches ``target`` (or the run fails)."""
        return while_loop(lambda c: (c[3][_F_T] < target) & running(c), make_body(target), c, max_attempts)

    if n_save:
        # Saving: an outer loop over the save times around the stepping loop. The recording buffers
        # live only in the outer loop, so the stepping loop carries small arrays alone (XLA's CPU
        # runtime runs a loop body whose buffers are all small far faster: ~0.4 vs ~1 us a step).
        def ctx_of(c: Any, tt: Array, xx: Array) -> Context:
            base = context.with_time(tt).with_continuous_state(xx)
            return set_rest(base, c[5][0][0]) if program else base

        def outer_body(oc: Any) -> Any:
            c, (k, buf) = oc
            target = jnp.where(k < n_save, ts[jnp.clip(k, 0, n_save - 1)], t_final)
            c = advance(c, target)
            t, x = c[3][_F_T], c[1]
            ok = c[2][_I_STATUS] == STATUS_OK
            if dense:
                # every save time the last step spans, up to DENSE_WINDOW of them per pass
                t_a, h_a, x_a, x_b, data = c[6]
                idx = k + jnp.arange(window, dtype=i32)
                tsw = ts[jnp.clip(idx, 0, n_save - 1)]
                hit = ok & (idx < n_save) & (tsw <= t)
                theta = jnp.clip(jnp.where(h_a > 0, (tsw - t_a) / jnp.where(h_a > 0, h_a, 1.0), 1.0), 0.0, 1.0)
                xs = jax.vmap(lambda th: integrator.interpolate(x_a, x_b, h_a, data, th))(theta)
                xs = jnp.where((tsw >= t)[:, None], x_b, xs)  # the end point itself, exactly
                vals = jax.vmap(lambda tt, xx: record(ctx_of(c, tt, xx)))(tsw, xs)
                # one predicated row write per slot (a scatter with dropped out-of-range rows would
                # give NaN cotangents); the record's tree first: inside the loop each buffer array
                # is an equinox buffer object
                for j in range(window):
                    row = jnp.clip(idx[j], 0, n_save - 1)
                    buf = jax.tree_util.tree_map(
                        lambda v, b, j=j, row=row: eqxi.buffer_at_set(b, row, v[j].astype(b.dtype), pred=hit[j]),
                        vals,
                        buf,
                    )
                return c, (k + jnp.sum(hit).astype(i32), buf)
            hit = ok & (k < n_save) & (t >= target)
            kk = jnp.clip(k, 0, n_save - 1)
            buf = jax.tree_util.tree_map(
                lambda v, b: eqxi.buffer_at_set(b, kk, v.astype(b.dtype), pred=hit), record(ctx_of(c, t, x)), buf
            )
            return c, (k + hit.astype(i32), buf)

        def outer_cond(oc: Any) -> Array:
            c, (k, _) = oc
            return ((k < n_save) | (c[3][_F_T] < t_final)) & running(c)

        out, save = while_loop(outer_cond, outer_body, (init, save0), n_save + 1, buffers=lambda oc: oc[1][1])
    else:
        out, save = advance(init, t_final), ()
    _, x, ic, fs, _, (evc, _), _ = out
    t = fs[_F_T]
    unfinished = (t < t_final) | ((save[0] < n_save) if n_save else False)
    status = jnp.where(unfinished & (ic[_I_STATUS] == STATUS_OK), STATUS_MAX_STEPS, ic[_I_STATUS]).astype(i32)
    stats = _statistics(
        steps=ic[_I_STEPS],
        attempts=ic[_I_ATTEMPTS],
        evals=ic[_I_ATTEMPTS] * (integrator.num_evaluations() - int(fsal) + hermite_extra) + ic[_I_KEVALS],
        shrink_err=ic[_I_SHRINK],
        substep_fail=ic[_I_FAIL],
        smallest=fs[_F_SMALLEST],
        largest=fs[_F_LARGEST],
        initial=fs[_F_INITIAL],
        previous=fs[_F_PREVIOUS],
    )
    buf = save[1] if n_save else _record_buffer(record, context, 0)
    if program:
        rest, _, logs, _, counts, _ = evc
        return _Raw(t, x, buf, stats, status, rest, logs, counts)
    return _Raw(t, x, buf, stats, status)


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
        self._compiled: dict[Any, Any] = {}
        self._updates_at_start = True
        self._last_result: SimulationResult | None = None
        self._init_publishes: Any = ()
        self._init_logs: Any = ()
        self._wall_start = 0.0
        self._sim_start = 0.0

    def _advance_fn(self, updates_at_start: bool) -> Any:
        key = ("advance", updates_at_start)
        if key not in self._compiled:
            system, integrator = self._system, self._integrator

            @jax.jit
            def advance(context: Context, t_final: Array) -> SimulationResult:
                return simulate(
                    system, context, t_final, integrator, initialize=False, updates_at_start=updates_at_start
                )

            self._compiled[key] = advance
        return self._compiled[key]

    def initialize(self) -> Context:
        """Run the initialization events, then publishes due at the start time (Drake: ``Initialize``).

        Called by the first :meth:`advance_to` if not called before. Returns the context.
        """
        program = EventProgram(self._system)
        if program:
            context = self._context
            context, self._init_publishes = program.initialize(context)
            k0 = program.init_counters(context.get_time(), True, True)
            logs0 = program.allocate_logs(context, [1] * len(program.loop_publish))
            _, self._init_logs, _ = program.publishes(context, k0, jnp.array(True), logs0)
            self._context = context
        self._initialized = True
        self._updates_at_start = True
        self._wall_start = _time.perf_counter()
        self._sim_start = float(self._context.get_time())
        return self._context

    def advance_to(self, boundary_time: float) -> Context:
        """Advance the context to ``boundary_time`` (Drake: ``AdvanceTo``); returns the new context.

        Updates due exactly at ``boundary_time`` stay pending (performed by the next ``advance_to``
        or by :meth:`advance_pending_events`); publishes due then are done.
        """
        if not self._initialized:
            self.initialize()
        t = float(self._context.get_time())
        if boundary_time < t:
            raise JaxsysError(
                f"Simulator.advance_to({boundary_time}): the context is already at t={t}; time cannot go backwards."
            )
        fn = self._advance_fn(self._updates_at_start)
        result = fn(self._context, jnp.asarray(boundary_time, self._context.time.dtype))
        self._last_result = result
        self._context = result.context
        self._updates_at_start = True
        for k, v in result.stats.as_dict().items():
            if k.startswith("num_"):
                self._stats[k] = self._stats.get(k, 0) + v
            else:
                self._stats[k] = v
        for k, v in result.simulator_stats.as_dict().items():
            if k != "num_steps_taken":
                self._stats[k] = self._stats.get(k, 0) + v
        if self._rate > 0:
            target_wall = (boundary_time - self._sim_start) / self._rate
            elapsed = _time.perf_counter() - self._wall_start
            if target_wall > elapsed:
                _time.sleep(target_wall - elapsed)
        return self._context

    def advance_pending_events(self) -> Context:
        """Perform the updates due at the current time (Drake: ``AdvancePendingEvents``)."""
        if not self._initialized:
            self.initialize()
        if self._updates_at_start:
            self._context = advance_pending_events(self._system, self._context)
            self._updates_at_start = False
        return self._context

    def get_last_result(self) -> SimulationResult | None:
        """The SimulationResult of the last ``advance_to`` (publish logs, statistics)."""
        return self._last_result

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
        self._compiled = {}
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
