"""The entry point: ``simulate(system, context, t_final, ...)``, pure and jit-able.

``simulate`` checks its inputs, runs the initialization events, then hands one `Run`
to one of two loops and builds the `SimulationResult` from what it returns:

* fixed-step runs whose step count is known while tracing: a ``lax.scan`` (`fixed_step`);
* everything else (error control, witnesses, times known only at run time): the while loop of step
  attempts of `stepping`, which follows Drake's ``Simulator::Step``, with step-size control
  from `step_size`, saving from `recording` and witness isolation from
  `witness_isolation`.

Problems are never silent: exceeding ``max_steps``, a step below the minimum, or a non-finite state
sets ``result.status``; with ``throw=True`` (default) an error is raised (``equinox.error_if``, so it
works inside ``jit``).

Imports: the framework and every analysis module of the loop (this is the top of the loop's imports;
`simulator` builds on it).
"""

from __future__ import annotations

import copy
import functools
import os
import warnings
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context
from ..framework.errors import JaxsysError
from ..framework.event_status import REACHED_TERMINATION, EventStatus
from ..framework.events import time_tolerance
from ..framework.system import System
from .compile_cache import SystemCache, deref
from .event_loop import EventProgram, _applied, get_rest, has_events, set_rest
from .fixed_step import FixedStepScan, plan_fixed_steps
from .integrators import IntegratorBase, RungeKutta3Integrator
from .integrators.base import rolled_stages, step_aux
from .loop_state import EventCarry
from .loops import Run, make_while_loop
from .options import DiscreteAdjoint, EventOptions, RecursiveCheckpointAdjoint, SaveAt, unpack_options
from .precision import full_precision
from .progress import AbstractProgressMeter, NoProgressMeter
from .recording import check_save_times, concrete, dense_window
from .results import (
    STATUS_BAD_TIMES,
    STATUS_EVENT_FAILED,
    STATUS_MESSAGES,
    STATUS_OK,
    LoopOutput,
    SimulationResult,
    SimulatorStatistics,
    status_message,
)
from .stepping import StepLoop
from .trajectory import DenseTrajectory


Array = jax.Array


def _default_record(context: Context) -> Array:
    return context.get_continuous_state_vector()


_TRACER_ERRORS = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerBoolConversionError,
    jax.errors.TracerIntegerConversionError,
    jax.errors.TracerArrayConversionError,
)


_LIBRARIES = tuple(
    os.path.dirname(os.path.abspath(f))
    for f in (getattr(m, "__file__", None) for m in (jax, np, eqx, os, functools))
    if f
)


def _user_frame(tb: Any) -> tuple[Any, str, str] | None:
    """The innermost traceback frame of a method of a System outside jaxsys: (system, method, where);
    else the innermost user function (outside jaxsys, JAX, NumPy and the standard library) called by a
    system, such as a FunctionSystem's function: (that system, the function's name, where)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = called = None
    caller = None
    while tb is not None:
        frame = tb.tb_frame
        path = os.path.abspath(frame.f_code.co_filename)
        owner = frame.f_locals.get("self")
        where = f"{frame.f_code.co_filename}:{tb.tb_lineno}"
        if isinstance(owner, System):
            caller = owner
            if not path.startswith(package):
                found = (owner, frame.f_code.co_name, where)
        elif caller is not None and not path.startswith(package) and not path.startswith(_LIBRARIES):
            called = (caller, f"function {frame.f_code.co_name}", where)
        tb = tb.tb_next
    return found or called


def explain_tracer_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Re-raise JAX's tracer errors (Python control flow or a conversion on a traced value, inside the
    user's dynamics, outputs or events) as a JaxsysError naming the system, its method and the line,
    with the JAX way to write it."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except _TRACER_ERRORS as e:
            where = _user_frame(e.__traceback__)
            if where is None:
                raise
            owner, method, line = where
            raise JaxsysError(
                f"{fn.__name__}: System {owner.get_system_id_string()}, method {method} "
                f"({line}): {type(e).__name__}: Python control flow or a conversion (if/while on a value, float(), "
                f"int(), np.asarray()) on a value that is traced. The simulation traces every method once for all "
                f"values, so values are symbolic there: write the branch with jnp.where(cond, a, b) or "
                f"jax.lax.cond, loops with jax.lax.fori_loop / while_loop, and keep computations in jax.numpy. "
                f"JAX's message: {str(e).splitlines()[0]}"
            ) from e

    return wrapper


@explain_tracer_errors
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
    updates_at_start: bool | Array = True,
    log_capacity: int = 10_000,
    witness_iterations: int = 40,
    witness_isolation: bool = True,
    loop: str = "bounded",
    checkpoints: int | None = None,
    dense_output: bool = False,
    pending_witness_events: Any = None,
    monitor: Callable[[Context], Any] | None = None,
    at_least_one_step: bool = False,
    initial_step_size: Any = None,
    *,
    events: EventOptions | None = None,
    adjoint: DiscreteAdjoint | RecursiveCheckpointAdjoint | None = None,
) -> SimulationResult:
    """Integrate ``system`` from ``context`` to ``t_final`` (Drake's ``Simulator::AdvanceTo``, pure).

    The options come flat (the keywords below) or grouped by concern, as Diffrax's are:
    ``save_at=js.SaveAt(ts, record=..., dense=...)``, ``events=js.EventOptions(witness_isolation=...,
    monitor=..., ...)``, ``adjoint=js.RecursiveCheckpointAdjoint(checkpoints)`` (or the default
    ``js.DiscreteAdjoint()``): the same run either way (see `jaxsys.analysis.options`).

    **Arguments:**
    - `system`: any System or Diagram.
    - `context`: its context at the start time (``context.get_time()``).
    - `t_final`: end time, s.
    - `integrator`: an integrator module (default: Drake's default, ``RungeKutta3Integrator`` with
      ``max_step_size=0.1`` and target accuracy 1e-4, as in Drake's ``SimulatorConfig``).
    - `save_at`: increasing times in [t0, t_final] at which to record (default: none), or a
      [`SaveAt`][jaxsys.SaveAt] (times, ``record`` and ``dense`` together).
    - `record`: ``f(context) -> pytree`` recorded at ``save_at`` (default: the continuous state
      vector). Use it to record outputs, e.g. ``lambda c: diagram.get_output_port(0).eval(c)``.
    - `throw`: raise on failure (default); if False, inspect ``result.status``.
    - `initialize`: run initialization events first, and publishes due at the start (Drake's
      ``Simulator::Initialize``). Pass False to continue from the final context of an earlier run.
    - `updates_at_start`: perform the updates due exactly at the start time (Drake does, in the
      first step). False after [`advance_pending_events`][jaxsys.advance_pending_events] already did them.
      May be a traced bool (one compiled run serves both).
    - `log_capacity`: records kept per per-step publish event (periodic publish logs are sized
      from their period and the horizon when those are known while tracing).
    - `witness_iterations`: precision of witness isolation: the crossing is isolated to a window of
      (step size) * 2**-witness_iterations (default 40: ~1e-12 of the step) or, when the context has
      an accuracy set (``context.with_accuracy(a)``), Drake's 0.01 * a seconds; never narrower than
      16 units in the last place of the time (float32: ~2e-6 s * max(1, |t|)). The state lands on
      the window's far side: never before the crossing, at most one window after it.
    - `witness_isolation`: True (default): isolate each crossing by trial steps and land just past it.
      False: no isolation (Drake's behaviour when the context has no accuracy set): the events of a
      witness that changed sign fire at the end of the step in which it did (a sign change at the
      step's ends only). With isolation, witnesses are also checked at 3 interior points of the step's
      continuous extension, so two crossings inside one step are seen when they are more than a
      quarter of the step apart.
    - `loop`: how the variable-length (error-controlled or event-driven) loop is built:
      ``"bounded"`` (default: ``jit``, ``vmap``, ``jvp``/``jacfwd``, ``grad`` and second derivatives
      all work; evaluated it runs as a plain ``lax.while_loop``; ``grad`` runs its discrete adjoint
      from checkpoints placed at run time, ``jacfwd`` its forward sensitivity; see
      ``jaxsys.analysis.adjoint``) or
      ``"checkpointed"`` (reverse mode keeps only ``checkpoints`` saved states, recomputing the rest:
      for very long horizons whose ``grad`` would not fit in memory; forward-mode ``jvp``/``jacfwd``
      is not available with it). Fixed-step runs with a static step count are a ``lax.scan`` either way.
    - `checkpoints`: for ``loop="checkpointed"`` (default: equinox's, about log(max_steps)).
    - `dense_output`: record ``save_at`` values from the integrator's continuous extension of each
      step (Dormand-Prince: its 4th-order interpolant; other explicit Runge-Kutta methods: cubic
      Hermite) instead of truncating steps to land on them (the default, as Drake's ``AdvanceTo``
      does). The step sequence then does not depend on the save times. Explicit Runge-Kutta
      integrators, systems without events.
    - `pending_witness_events`: the ``pending_witness_events`` of the run this one continues (its
      witnesses' update events that were due at its end are performed at this run's start).
    - `monitor`: ``f(context) -> EventStatus or None``, called at the end of every step after its
      publishes, and after the initialization publishes (Drake's ``Simulator::set_monitor``). A
      ``reached_termination`` status stops the run there; ``failed`` stops it with an error (or the
      ``EVENT_FAILED`` status with ``throw=False``). Must be pure (it is traced).
    - `at_least_one_step`: take one step even when ``t_final`` is the start time (a step of zero
      length: the updates due now, the per-step publishes, the monitor), as every call of Drake's
      ``AdvanceTo`` does; the [`Simulator`][jaxsys.Simulator]'s ``advance_to(now)`` and
      ``advance_pending_events()`` pass True. Default False: a run to its own start time takes no step.
    - `initial_step_size`: error control's first step attempt, s (a value, not structure: a new one
      does not recompile), e.g. the ``stats.ideal_next_step_size`` of the run this one continues, as
      Drake's integrator keeps its ideal next step between ``AdvanceTo`` calls (the ``Simulator``
      does this). Default: the integrator's ``initial_step_size_target``. Ignored in fixed-step mode.
    - `progress_meter`: e.g. ``TqdmProgressMeter()`` for a progress bar of simulated time (default
      none; see `jaxsys.analysis.progress`).
    - `events`: an [`EventOptions`][jaxsys.EventOptions] holding ``witness_isolation``,
      ``witness_iterations``, ``monitor``, ``log_capacity``, ``initialize``, ``updates_at_start`` and
      ``pending_witness_events`` (instead of those keywords).
    - `adjoint`: [`DiscreteAdjoint`][jaxsys.DiscreteAdjoint] (the default, ``loop="bounded"``) or
      [`RecursiveCheckpointAdjoint`][jaxsys.RecursiveCheckpointAdjoint] (``loop="checkpointed"`` with its
      ``checkpoints``), instead of ``loop`` / ``checkpoints``.
    - `start_time`: only for fixed-step runs whose context time is traced (under ``jit``/``vmap``):
      the start time the static step plan (a ``lax.scan`` of known length) assumes. Default 0.0;
      a context that starts elsewhere raises an error instead of giving wrong times.

    **Stopping on an event.** Event handlers (and the monitor) may return an
    [`EventStatus`][jaxsys.EventStatus] with their values. As in Drake's ``AdvanceTo``, a
    ``reached_termination`` status from an update at the start of a step stops the run before that
    step (the update is kept); from a publish or the monitor, after the step. The final context is
    the state at that time (``result.reached_termination()``, ``result.simulator_status()``), and
    the time is differentiable when the event is a witness's (a terminating event, as Diffrax's).
    Save times after it are not reached: their rows of ``ys`` are NaN. A ``failed`` status stops the
    run with an error naming the system and its message (``throw=False``: the ``EVENT_FAILED``
    status).

    **Returns:** a [`SimulationResult`][jaxsys.SimulationResult]. Works under ``jax.jit`` (make ``system`` and
    ``integrator`` static, e.g. with ``eqx.filter_jit``), ``jax.vmap`` over contexts, and
    ``jax.grad`` / ``jax.jvp`` (any order, and combined with ``vmap`` either way round) with respect
    to anything numeric in the context.

    **Errors.** Arguments whose values are known here are checked here (named errors). Traced times
    that are invalid give the ``BAD_TIMES`` status; failures during the run (NaN, minimum step,
    Newton, max_steps) give their status. With ``throw=True`` a bad status raises through
    ``equinox.error_if``: directly or under ``eqx.filter_jit`` an ``EquinoxRuntimeError`` with the
    message; under a plain ``jax.jit``, JAX wraps it as "INTERNAL: CpuCallback error" with the message
    at the end, so prefer ``eqx.filter_jit``, or ``throw=False`` and ``result.status``. With JAX's
    persistent compilation cache configured (``jax_compilation_cache_dir``), a direct call checks the
    status after the run instead (the same ``EquinoxRuntimeError``), so that the cache keeps its
    program (JAX does not cache programs holding host callbacks, which ``error_if`` is).

    **What a derivative is.** The derivative of the map the run computed:
    - Fixed steps: exactly that map's derivative (finite differences of the same run agree).
    - Error control: the computed map's derivative *with its step sizes held fixed* (step-size
      selection is not differentiated, as in Diffrax). It converges to the true sensitivity as the
      accuracy is tightened, with an error of the order of the run's own error (differentiating the
      controller would add terms of that size that do not converge).
    - Witness events: the event time is the zero of the function the isolation root-found (the
      witness after a trial step of the integrator, as a function of the step's size), and its
      derivatives are those of that zero by the implicit function theorem, with the rate of the
      step map (not the ODE's), so they are exact for every integrator at any step size, to any
      order (Hessians through impacts). A grazing crossing (witness rate zero) has no derivative.
    - Periodic events happen at fixed times, so their times have no derivative; what they compute
      does.
    """
    if integrator is None:
        integrator = _DEFAULT_INTEGRATOR
    if events is not None or adjoint is not None or isinstance(save_at, SaveAt):
        save_at, o = unpack_options(
            save_at,
            adjoint,
            events,
            dict(
                record=record,
                dense_output=dense_output,
                loop=loop,
                checkpoints=checkpoints,
                witness_isolation=witness_isolation,
                witness_iterations=witness_iterations,
                monitor=monitor,
                log_capacity=log_capacity,
                initialize=initialize,
                updates_at_start=updates_at_start,
                pending_witness_events=pending_witness_events,
                trajectory=0,
            ),
        )
        record, dense_output, loop, checkpoints = o["record"], o["dense_output"], o["loop"], o["checkpoints"]
        witness_isolation, witness_iterations, monitor = o["witness_isolation"], o["witness_iterations"], o["monitor"]
        log_capacity, initialize, updates_at_start = o["log_capacity"], o["initialize"], o["updates_at_start"]
        pending_witness_events = o["pending_witness_events"]
        trajectory = o["trajectory"]
    else:
        trajectory = 0
    if isinstance(save_at, (list, tuple)):  # a plain list of times, as a user writes it
        numbers = all(isinstance(t, (int, float, np.integer, np.floating)) and not isinstance(t, bool) for t in save_at)
        save_at = np.asarray(save_at, dtype=np.float64) if numbers and save_at else save_at
    # (a context whose state or parameters are traced while its time is known: an eager jax.grad /
    # jax.jvp / jax.vmap / jax.hessian of a function that simulates. It goes through the same compiled
    # entry as a plain call, which JAX then differentiates or batches as one program; traced through
    # op by op instead, every loop and conditional of the run compiled on its own, every call: 372
    # compilations, 29 s, in the transforms notebook)
    # The context's time may be traced (contexts stacked with their times under an eager jax.vmap: the
    # run is then one compiled program too, keyed on the known horizon and save times; op by op it
    # compiled ~100 small programs, ~2 s, every call)
    cacheable = (
        _ENTRY_CACHE["enabled"]
        and not dense_output
        and not trajectory
        and isinstance(context, Context)
        and not _any_tracer((t_final, save_at, pending_witness_events, updates_at_start))
    )
    fast_key: Any = None
    if cacheable:
        # a repeated call: the same system, integrator, functions and options (by identity) skip the
        # checks and key building whose answers depend on those alone (issue #40: the per-call overhead)
        fast_key = _fast_key(
            (integrator, record, monitor, progress_meter),
            context,
            throw,
            start_time,
            initialize,
            updates_at_start,
            log_capacity,
            witness_iterations,
            witness_isolation,
            loop,
            checkpoints,
            at_least_one_step,
            initial_step_size is None,
            pending_witness_events is None,
        )
        entry = None if fast_key is None else _FAST.peek(system, fast_key)
        if entry is not None:
            _check_values(system, context, t_final, save_at)
            if entry.warn:
                _warn_unreachable_accuracy(system, context, integrator)
            return _run_entry(system, entry, context, t_final, save_at, pending_witness_events, initial_step_size)
    _check_static(system, integrator, loop, dense_output)
    _check_values(system, context, t_final, save_at)
    _warn_unreachable_accuracy(system, context, integrator)
    if monitor is not None and not callable(monitor):
        raise JaxsysError(f"simulate: monitor must be a function f(context) -> EventStatus or None; got {monitor!r}.")
    events_present = has_events(system, monitor)
    if trajectory and (events_present or not integrator.supports_dense_output()):
        raise JaxsysError(
            f"simulate: SaveAt(trajectory=...) keeps each step's continuous extension: it needs an integrator that "
            f"has one (the explicit Runge-Kutta methods; {type(integrator).__name__}"
            f"{' has one' if integrator.supports_dense_output() else ' has none'}) and a system without events, "
            f"witness functions or a monitor (System {system.get_system_id_string()}"
            f"{' has some' if events_present else ' has none'}): an event changes the state within a step."
        )
    if dense_output and events_present:
        raise JaxsysError(
            f"simulate: dense_output=True is not available for systems with events or witness functions, or "
            f"with a monitor (System {system.get_system_id_string()} has some): an event changes the state "
            f"within the step the interpolant spans. Leave dense_output off: save_at times are then reached by "
            f"stepping."
        )
    options = dict(
        integrator=integrator,
        record=record,
        throw=throw,
        start_time=start_time,
        progress_meter=progress_meter,
        initialize=initialize,
        updates_at_start=updates_at_start,
        log_capacity=log_capacity,
        witness_iterations=witness_iterations,
        witness_isolation=witness_isolation,
        loop=loop,
        checkpoints=checkpoints,
        dense_output=dense_output,
        monitor=monitor,
        at_least_one_step=at_least_one_step,
        initial_step_size=initial_step_size,
        trajectory=trajectory,
        # (saves one step can span, while the save times are known: sizes the dense saving loop)
        dense_window=dense_window(save_at, integrator.max_step_size) if dense_output and save_at is not None else None,
    )
    if cacheable and not _any_tracer(system):
        entry = _entry(system, events_present, context, integrator, options)
        if fast_key is not None:
            _FAST.put(system, fast_key, entry)
        return _run_entry(system, entry, context, t_final, save_at, pending_witness_events, initial_step_size)
    return _simulate_body(system, context, t_final, save_at, pending_witness_events, None, **options)


# Drake's SimulatorConfig default (one instance: a call without an integrator is a repeated call too)
_DEFAULT_INTEGRATOR = RungeKutta3Integrator(max_step_size=0.1, target_accuracy=1e-4)


def _any_tracer(tree: Any) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(tree))


try:  # whether no JAX trace is active (JAX internals; without it, a call counts as traced)
    from jax._src.core import trace_state_clean as _trace_state_clean

    trace_state_clean: Any = _trace_state_clean
except ImportError:  # pragma: no cover (another JAX)
    trace_state_clean = None


_ENTRY_CACHE: dict[str, Any] = {"enabled": True, "traces": 0, "size": 64}
_COMPILED: SystemCache[Any] = SystemCache("simulate", maxsize=64)
# per (system, integrator, functions and options by identity): what _entry derived for them
_FAST: SystemCache[_Entry] = SystemCache("simulate entries", maxsize=64)


class _Key:
    """A cache key whose hash is computed once (hashing an equinox Module walks its fields)."""

    __slots__ = ("hash", "value")

    def __init__(self, value: Any) -> None:
        self.value = value
        self.hash = hash(value)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, _Key) and self.hash == other.hash and self.value == other.value)


class _Entry:
    """What an eager ``simulate`` call derives from its static arguments alone: the compiled run's key
    (minus the times), whether its loop takes the times as arguments, the integrator template with a
    traced accuracy, and whether its accuracy warrants the float32 warning. It holds the integrator and
    the functions it was keyed on by identity, so their ids stay theirs while it lives."""

    __slots__ = ("dynamic_times", "integrator", "key", "options", "scan_plan", "template", "warn")

    def __init__(
        self,
        integrator: Any,
        options: dict[str, Any],
        dynamic_times: bool,
        template: Any,
        key: _Key,
        warn: bool,
        scan_plan: bool = False,
    ) -> None:
        self.integrator = integrator
        self.options = options
        self.dynamic_times = dynamic_times
        self.scan_plan = scan_plan
        self.template = template
        self.key = key
        self.warn = warn


def _fast_key(held: tuple[Any, ...], context: Context, *flags: Any) -> Any:
    """The identity key of a call's static arguments: the ids of ``held`` (the integrator and the
    functions), the context's dtype and the option values ``flags`` (None when one is not hashable)."""
    key = (*map(id, held), getattr(context.get_time(), "dtype", None), *flags)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _entry(system: System, events_present: bool, context: Context, integrator: Any, options: dict[str, Any]) -> _Entry:
    """The static part of an eager call (see `_Entry`)."""
    scan_possible = integrator.get_fixed_step_mode() and not integrator.can_fail()
    # an error-controlled integrator's target accuracy is an argument too: a new tolerance does not
    # recompile (the cache key holds the integrator with a placeholder accuracy)
    traced = integrator.target_accuracy is not None and not integrator.get_fixed_step_mode()
    template = integrator._with_traced_accuracy("traced") if traced else None
    key_options = dict(options, integrator=template) if traced else dict(options)
    key_options["initial_step_size"] = options.get("initial_step_size") is None  # (a value: an argument)
    key = _Key(tuple(sorted((k, _hashable(v)) for k, v in key_options.items())))
    warn = (
        not integrator.get_fixed_step_mode()
        and integrator.target_accuracy is not None
        and isinstance(integrator.get_accuracy_in_use(), (int, float))
        and integrator.get_accuracy_in_use() < accuracy_floor(context.get_time().dtype)
    )
    # a fixed-step scan without events depends on the times only through its plan (step count, save
    # steps, whether the span is whole steps): keyed on that, the times are arguments
    scan_plan = (
        not events_present and scan_possible and not options.get("at_least_one_step") and not options.get("trajectory")
    )
    return _Entry(integrator, options, not events_present and not scan_possible, template, key, warn, scan_plan)


def _run_entry(
    system: System,
    entry: _Entry,
    context: Context,
    t_final: Any,
    save_at: Any,
    pending: Any,
    h0: Any,
) -> SimulationResult:
    """An eager ``simulate`` call: one compiled function per configuration, reused by later calls.

    Static (in the key): the system (by identity), the integrator and every option. The context, the
    pending witness flags and, for runs whose loop does not need them while tracing (error-controlled
    or implicit, without events), ``t_final`` and ``save_at`` are arguments: calls that change them
    do not recompile. A fixed-step run without events is keyed on its plan (`plan_fixed_steps`: the
    step count, the steps of the save times, whether the span is whole steps) and takes the times as
    arguments: a receding-horizon loop of equal spans (``simulate(.., (k + 1) h, ..)`` from ``k h``)
    compiles once. Systems with events (their logs are sized from the horizon) and fixed-step runs
    whose save times are off the step grid bake the times in: a new horizon compiles anew.
    Compiled with ``equinox.filter_jit``, so run-time errors arrive as clean ``EquinoxRuntimeError``.
    """
    integrator, options, dynamic_times = entry.integrator, entry.options, entry.dynamic_times
    traced_accuracy = entry.template is not None
    known = concrete(context.get_time())
    # (a traced start time: contexts batched with their times under an eager jax.vmap; the run then
    # takes the time from the context, with the horizon and save times baked in as known values)
    c_t0, c_tf = None if known is None else float(known), float(concrete(t_final))
    c_ts = None if save_at is None else np.asarray(concrete(save_at), dtype=np.float64).reshape(-1)
    plan = None
    if entry.scan_plan and c_t0 is not None:
        dtype0 = context.get_time().dtype
        plan = plan_fixed_steps(integrator.max_step_size, c_t0, c_tf, np.zeros(0) if c_ts is None else c_ts, dtype0)
    if dynamic_times:
        times_key: Any = ("dynamic", None if c_ts is None else c_ts.shape[0])
    elif plan is not None:
        n_plan, idx_plan, exact_plan = plan
        idx_key = None if idx_plan is None else tuple(int(i) for i in idx_plan)
        times_key = ("plan", n_plan, idx_key, exact_plan, None if c_ts is None else c_ts.shape[0])
    else:
        times_key = ("static", c_t0, c_tf, None if c_ts is None else tuple(c_ts.tolist()))
    # With JAX's persistent compilation cache on, a top-level call's status is checked after the run,
    # here, rather than by an error raised inside the program (a host callback: JAX does not cache
    # programs that hold one), so that a new process reuses the compiled run.
    after = bool(options["throw"]) and not options["trajectory"] and _persistent_cache_on() and _top_level()
    dtype = context.get_time().dtype
    times_args = dynamic_times or plan is not None
    tf_arg = np.asarray(c_tf, dtype) if times_args else None
    ts_arg = None if c_ts is None or not times_args else np.asarray(c_ts, dtype)
    # Times passed as arguments are checked here, on the values the run receives (cast to its dtype),
    # by the run's own rule: valid ones (the usual case) go to a program without the run-time check
    # (fewer kernels for XLA to compile: ~60 ms of a small diagram's first call). Times that passed the
    # eager checks but not this one became invalid when rounded to the run's dtype: an error here
    # (throw=True), or the program that reports them (status BAD_TIMES), as a traced call does.
    host_checked = False
    if times_args and c_t0 is not None:
        ts_run = np.zeros((0,), dtype) if ts_arg is None else ts_arg
        host_checked = bool(_times_ok(np.asarray(c_t0, dtype), tf_arg, ts_run, xp=np))
        if not host_checked and options["throw"]:
            raise JaxsysError(_rounded_times_message(c_t0, c_tf, c_ts, ts_run, dtype))
    # (counted here too, the save times at or before the start: an argument, not a reduction to compile)
    n0_arg = None
    if host_checked and ts_arg is not None:
        n0_arg = np.asarray(np.sum(ts_arg <= np.asarray(c_t0, dtype)), np.int32)
    key = (times_key, entry.key, pending is None, after, host_checked)
    if after:
        options = dict(options, throw=False)

    def build(ref: Any) -> Any:
        # (the compiled body reaches the system through a weak reference, and builds its event
        # program when traced: the cache does not keep a dropped system alive)
        def with_args(acc: Any, h: Any) -> dict[str, Any]:
            opts = dict(options, integrator=integrator._with_traced_accuracy(acc)) if traced_accuracy else options
            return dict(opts, initial_step_size=h, times_checked=host_checked)

        def with_count(acc: Any, h: Any, n0: Any) -> dict[str, Any]:
            return dict(with_args(acc, h), saves_at_start=n0)

        if dynamic_times:

            def body(ctx: Context, tf: Any, ts: Any, pend: Any, acc: Any, h: Any, n0: Any) -> SimulationResult:
                _ENTRY_CACHE["traces"] += 1
                system = deref(ref)
                return _simulate_body(system, ctx, tf, ts, pend, None, **with_count(acc, h, n0))

        elif plan is not None:

            def body(ctx: Context, tf: Any, ts: Any, pend: Any, acc: Any, h: Any, n0: Any) -> SimulationResult:
                _ENTRY_CACHE["traces"] += 1
                system = deref(ref)
                return _simulate_body(system, ctx, tf, ts, pend, None, fixed_plan=plan, **with_count(acc, h, n0))

        else:

            def body(ctx: Context, tf: Any, ts: Any, pend: Any, acc: Any, h: Any, n0: Any) -> SimulationResult:
                _ENTRY_CACHE["traces"] += 1
                system = deref(ref)
                return _simulate_body(system, ctx, c_tf, c_ts, pend, c_t0, **with_args(acc, h))

        return eqx.filter_jit(body)

    _COMPILED.maxsize = _FAST.maxsize = _ENTRY_CACHE["size"]
    compiled = _COMPILED.get(system, key, build)
    acc_arg = np.asarray(integrator.target_accuracy, dtype) if traced_accuracy else None
    h_arg = None if h0 is None else jnp.asarray(h0, dtype)
    result = compiled(context, tf_arg, ts_arg, pending, acc_arg, h_arg, n0_arg)
    if after:
        _raise_for_status(result, dtype, integrator.can_fail())
    return result


def _persistent_cache_on() -> bool:
    """Whether JAX's persistent compilation cache is configured (``jax_compilation_cache_dir``)."""
    try:
        config: Any = jax.config
        return bool(config.jax_compilation_cache_dir) and bool(config.jax_enable_compilation_cache)
    except AttributeError:  # pragma: no cover (another JAX)
        return False


def _top_level() -> bool:
    """Whether no JAX trace is active (a plain call, not under a transformation)."""
    return trace_state_clean is not None and bool(trace_state_clean())


def _failure_message(code: int, event_index: int, reasons: Any, dtype: Any, implicit: bool) -> str:
    """The error of a run that stopped with status ``code`` (``event_index``: the failing handler's
    reason, or -1), as ``throw=True`` raises it."""
    if code == STATUS_EVENT_FAILED and 0 <= event_index < len(reasons):
        path, message = reasons[event_index]
        return (
            f"simulate: System {path or '(unnamed)'} failed"
            + (f" with message '{message}'" if message else "")
            + " (an event handler or the monitor returned EventStatus.failed); the run stopped there. "
            + "Pass throw=False to get the result, with result.simulator_status()."
        )
    return status_message(code, dtype, implicit)


def _raise_for_status(result: SimulationResult, dtype: Any, implicit: bool) -> None:
    """``throw=True``'s error, raised after a run compiled without it (`_run_entry`)."""
    code = int(result.status)
    if code != STATUS_OK:
        index = -1 if result.event_status is None else int(result.event_status[1])
        raise eqx.EquinoxRuntimeError(_failure_message(code, index, result.status_reasons, dtype, implicit))


def _hashable(value: Any) -> Any:
    """An option as a cache key: itself when hashable, else its identity."""
    try:
        hash(value)
        return value
    except TypeError:
        return ("id", id(value))


def _simulate_body(*args: Any, **kwargs: Any) -> SimulationResult:
    """The run (`_simulate_body_impl`), traced with every matrix product at full precision: on GPUs
    JAX's default lets float32 products use TensorFloat-32 (~1e-3 relative), which put a floor under
    the error an integrator reaches (Radau5 on a float32 batch on an H100/H200: 7.2e-5 at every
    accuracy from 3e-4 to 1e-5, against 9.3e-6 at 3e-4 with full precision, as on a CPU). The model's
    own products inside the run (a LinearSystem's A x, say) are integrated at full precision too. No
    effect on a CPU."""
    with full_precision():
        return _simulate_body_impl(*args, **kwargs)


def _simulate_body_impl(
    system: System,
    context: Context,
    t_final: Any,
    save_at: Any,
    pending_witness_events: Any,
    known_t0: float | None,
    *,
    integrator: IntegratorBase,
    record: Callable[[Context], Any] | None,
    throw: bool,
    start_time: float | None,
    progress_meter: AbstractProgressMeter | None,
    initialize: bool,
    updates_at_start: bool | Array,
    log_capacity: int,
    witness_iterations: int,
    witness_isolation: bool,
    loop: str,
    checkpoints: int | None,
    dense_output: bool,
    monitor: Any = None,
    dense_window: int | None = None,
    at_least_one_step: bool = False,
    initial_step_size: Any = None,
    trajectory: int = 0,
    fixed_plan: Any = None,
    times_checked: bool = False,
    saves_at_start: Any = None,
) -> SimulationResult:
    """The run itself (after the eager checks). ``known_t0``: the context's start time when the
    context is traced but its time was known at the call (the compiled entry point). ``fixed_plan``:
    the fixed-step scan's plan (`plan_fixed_steps`), made at the call from the times that are traced
    here (a system without events). ``times_checked``: the traced times were checked at the call, on
    the values this program receives (`_run_entry`): the run does not check them again;
    ``saves_at_start``: how many save times are at or before the start, counted there too."""
    t0 = context.get_time()
    dtype = t0.dtype
    ts = jnp.zeros((0,), dtype) if save_at is None else jnp.asarray(save_at, dtype).reshape(-1)
    c_t0 = concrete(t0) if known_t0 is None else np.asarray(known_t0)
    c_tf = concrete(t_final)
    init_values: Any = ()
    events: Any = None
    # the run's event program: built (witnesses bound, handlers probed) and frozen before the loop
    program = EventProgram(system, context, monitor)
    if program:
        context, init_values, events = start_events(
            program, context, initialize, updates_at_start, c_t0, c_tf, log_capacity
        )
    progress = progress_meter if progress_meter is not None else NoProgressMeter()
    # times known only at run time are checked there: a bad one stops the run before its first step
    times_ok = None
    traced_times = c_t0 is None or c_tf is None or (save_at is not None and concrete(save_at) is None)
    if traced_times and not times_checked:
        times_ok = _times_ok(t0, jnp.asarray(t_final, dtype), ts)
        t_final = jnp.where(times_ok, t_final, t0)
        ts = jnp.where(times_ok, ts, t0 + jnp.arange(ts.shape[0], dtype=dtype) * 0.0)
    run = _make_run(
        system, context, integrator, _checked_record(record or _default_record), t_final, ts, progress, saves_at_start
    )
    fixed = integrator.get_fixed_step_mode()
    plan = None
    t0_plan = float(c_t0) if c_t0 is not None else float(start_time or 0.0)
    events_fit_scan = not program or (
        not program.witnesses and not program.timed_leaves and program.aligned(t0_plan, integrator.max_step_size)
    )
    # (a method whose steps can fail, the implicit ones, retries failed steps: the while loop)
    # (a kept trajectory is recorded by the while loop: one code path for its segments)
    if fixed_plan is not None:
        plan = fixed_plan
    elif fixed and events_fit_scan and not integrator.can_fail() and not at_least_one_step and not trajectory:
        c_ts = np.zeros(0) if save_at is None else concrete(save_at)
        plan = plan_fixed_steps(integrator.max_step_size, t0_plan, c_tf, c_ts, context.get_time().dtype)
    if plan is not None:
        _pending_flags(program, pending_witness_events)  # (checked: a system without witnesses)
        scan_events = events[:5] + (updates_at_start, events[5]) if program else None
        n_plan, idx_plan, exact_plan = plan
        raw = FixedStepScan(run, n_plan, idx_plan, exact_plan, scan_events).simulate()
    else:
        events0: EventCarry | tuple[()] = ()
        if program:
            _, k0, logs0, rest0, counts0, status0 = events
            pending = _pending_flags(program, pending_witness_events)
            if initialize:
                # the right-now timed updates Initialize found: performed at the first step's start
                now = _right_now(program, context, "update")
                if now is not None:
                    pending = pending | now
            guard0 = program.initial_guard(context.get_time().dtype)
            events0 = EventCarry(rest0, k0, logs0, jnp.array(False), counts0, pending, status0, guard0)
        stepper = StepLoop(
            run,
            fixed,
            program,
            witness_iterations,
            dense_output,
            make_while_loop(loop, checkpoints),
            witness_isolation,
            dense_window,
            at_least_one_step,
            initial_step_size,
            trajectory,
        )
        raw = stepper.simulate(events0)
    progress.close(run.aux["progress"][1], raw.t)
    # a fixed-step plan made for an assumed start time is checked against the traced one
    planned_t0 = (t0, t0_plan) if plan is not None and c_t0 is None and fixed_plan is None else None
    if times_ok is not None:
        raw = raw._replace(status=jnp.where(times_ok, raw.status, STATUS_BAD_TIMES).astype(raw.status.dtype))
    return _finish(run, raw, program, init_values, throw, planned_t0, events[5] if program else None)


def _rounded_times_message(t0: float, t_final: float, ts: Any, ts_run: Any, dtype: Any) -> str:
    """The error for times valid as given but not once rounded to the run's dtype (`_run_entry`)."""
    name = jnp.dtype(dtype).name
    if ts_run.shape[0] > 1 and np.any(np.diff(ts_run) <= 0):
        i = int(np.argmax(np.diff(ts_run) <= 0))
        what = (
            f"save_at[{i + 1}] = {float(ts[i + 1])!r} and save_at[{i}] = {float(ts[i])!r} are equal once rounded to "
            f"{name} ({float(ts_run[i])!r}): save times must be strictly increasing in the run's dtype"
        )
    else:
        what = (
            f"the save times (from {float(ts[0])!r} to {float(ts[-1])!r}) leave [t0, t_final] = [{float(t0)!r}, "
            f"{float(t_final)!r}] once rounded to {name}"
            if ts is not None and len(ts)
            else f"t_final = {float(t_final)!r} is before the start time {float(t0)!r} once rounded to {name}"
        )
    return (
        f"simulate: {what} (the context's dtype is {name}). Space the times further apart, or enable float64 "
        f"(jax.config.update('jax_enable_x64', True)) before creating the context. (throw=False returns the result "
        f"with status BAD_TIMES instead.)"
    )


def _times_ok(t0: Any, t_final: Any, ts: Any, xp: Any = jnp) -> Any:
    """The run-time check of times that were traced: finite, t0 <= t_final, save times finite, strictly
    increasing and within [t0, t_final] (the eager checks of `_check_values`, inside jit). ``xp=np``:
    the same rule on known values, in their dtype (`_run_entry`)."""
    ok = xp.isfinite(t0) & xp.isfinite(t_final) & (t_final >= t0)
    if ts.shape[0]:
        scale = xp.maximum(1.0, xp.abs(t_final))
        ok = ok & xp.all(xp.isfinite(ts)) & (ts[0] >= t0 - 1e-12 * scale) & (ts[-1] <= t_final + 1e-12 * scale)
        ok = ok & xp.all(xp.diff(ts) > 0)
    return ok


def _pending_flags(program: EventProgram, pending: Any) -> Array:
    """The pending witness flags a run starts with (checked against the system's witnesses)."""
    n_w = len(program.witnesses) + len(program.timed) if program else 0
    if pending is None:
        return jnp.zeros((n_w,), bool)
    flags = jnp.asarray(pending)
    if flags.shape != (n_w,) or flags.dtype != bool:
        raise JaxsysError(
            f"simulate: pending_witness_events must be the pending_witness_events of an earlier result for this "
            f"system: a bool array of shape ({n_w},) (one per witness function, then one per timed event); got "
            f"{flags.dtype}{flags.shape}."
        )
    return flags


class PrecisionWarning(UserWarning):
    """A requested accuracy is finer than the context's dtype can deliver (float32: ~1e-6)."""


def accuracy_floor(dtype: Any) -> float:
    """The finest target accuracy error control can meet in ``dtype``: 8 units in the last place
    (float32: 9.5e-7; float64: 1.8e-15). Below it, rounding errors of the steps themselves exceed
    the target: the error estimate is noise and the run's error stops following the accuracy."""
    return 8.0 * float(jnp.finfo(dtype).eps)


def _warn_unreachable_accuracy(system: System, context: Context, integrator: IntegratorBase) -> None:
    """Warn at call time when an error-controlled run asks for an accuracy its dtype cannot deliver
    (issue #36: float32 at 1e-10 gave 2e-6, at 1e-12 7.7e-4 after 366,104 steps, all 'ok')."""
    if integrator.get_fixed_step_mode() or integrator.target_accuracy is None:
        return
    dtype = context.get_time().dtype
    accuracy = integrator.get_accuracy_in_use()
    if isinstance(accuracy, (int, float)) and accuracy < accuracy_floor(dtype):
        name = jnp.dtype(dtype).name
        warnings.warn(
            f"simulate: target accuracy {accuracy:g} on System {system.get_system_id_string()} is finer than "
            f"{name} can deliver (~{accuracy_floor(dtype):.1g}: the error estimate of each step is rounding "
            f"noise below that); the run's error will be larger than asked, though its status says ok. Enable "
            f"float64 (jax.config.update('jax_enable_x64', True) before creating the context) or ask for "
            f"{accuracy_floor(dtype):.0e} or more.",
            PrecisionWarning,
            stacklevel=3,
        )


def _check_static(system: System, integrator: Any, loop: str, dense_output: bool) -> None:
    """Eager checks of simulate's static arguments (the system, the integrator, the options)."""
    if not isinstance(system, System):
        raise JaxsysError(f"simulate: expected a System, got {type(system).__name__}.")
    if isinstance(integrator, type) and issubclass(integrator, IntegratorBase):
        raise JaxsysError(
            f"simulate: integrator is the class {integrator.__name__}; pass an instance, e.g. "
            f"{integrator.__name__}() or {integrator.__name__}(target_accuracy=1e-6)."
        )
    if not isinstance(integrator, IntegratorBase):
        raise JaxsysError(
            f"simulate: integrator must be an integrator instance (an IntegratorBase, e.g. "
            f"js.RungeKutta3Integrator()); got {type(integrator).__name__}."
        )
    if dense_output and not integrator.supports_dense_output():
        raise JaxsysError(
            f"simulate: dense_output=True needs an integrator with a continuous extension (the explicit "
            f"Runge-Kutta ones); {type(integrator).__name__} has none. Leave dense_output off: save_at "
            f"times are then reached by stepping to them."
        )
    if loop not in ("bounded", "checkpointed"):
        raise JaxsysError(f"simulate: loop must be 'bounded' or 'checkpointed'; got {loop!r}.")


def _floating(value: Any) -> tuple[bool, Any]:
    """Whether ``value`` (an array or a number) has a real floating dtype, and that dtype."""
    dt = getattr(value, "dtype", None)
    if dt is None:
        dt = jnp.result_type(value)
    return bool(jnp.issubdtype(dt, jnp.floating)), dt


def _check_values(system: System, context: Context, t_final: Any, save_at: Any) -> None:
    """Eager checks of simulate's arguments that change from call to call (the context, the times),
    where their values are known while tracing; the traced ones are checked in the run (`_times_ok`).
    ``system`` is a System (`_check_static`, or a cached entry of it)."""
    system.validate_context(context)
    t0 = context.get_time()
    if np.ndim(t0) != 0:
        raise JaxsysError(
            f"simulate: the context of System {system.get_system_id_string()} is batched (its time has shape "
            f"{tuple(jnp.shape(t0))}); "
            f"simulate runs one context. Use js.batch_simulate(system, contexts, ...), or "
            f"jax.vmap(lambda c: js.simulate(system, c, ...))(contexts)."
        )
    for what, value in (("time", t0), ("continuous state", context.get_continuous_state_vector())):
        ok, dt = _floating(value)
        if not ok:
            raise JaxsysError(
                f"simulate: the context's {what} (System {system.get_system_id_string()}) has dtype "
                f"{jnp.dtype(dt).name}; simulate needs "
                f"a real floating dtype (create the context with create_default_context(jnp.float32) or "
                f"(jnp.float64)). A complex state integrates as its real and imaginary parts: declare both."
            )
    if isinstance(t_final, (int, float)) and not isinstance(t_final, bool):
        tf_shape, tf_kind = (), "f"
    else:
        try:
            # (np.shape: a list is a shape error here, not a JAX deprecation warning, or an error later)
            tf_shape = tuple(np.shape(t_final))
            tf_kind = "O" if isinstance(t_final, (list, tuple)) else jnp.dtype(jnp.result_type(t_final)).kind
        except TypeError:
            tf_shape, tf_kind = tuple(np.shape(t_final)), "O"
    if tf_shape != () or tf_kind not in "iuf":
        raise JaxsysError(
            f"simulate: t_final must be a real scalar time in seconds; got {type(t_final).__name__} of shape "
            f"{tf_shape}."
        )
    c_t0, c_tf = concrete(t0), concrete(t_final)
    if c_t0 is not None and not np.isfinite(c_t0):
        raise JaxsysError(
            f"simulate: the context's time is {float(c_t0)} (System {system.get_system_id_string()}); it must be "
            f"finite."
        )
    if c_tf is not None and not np.isfinite(c_tf):
        raise JaxsysError(
            f"simulate: t_final must be a finite time in seconds; got {float(c_tf)}. (A run to infinity never "
            f"ends: choose a horizon, or stop on an event.)"
        )
    if save_at is not None:
        check_save_times(save_at, t_final, t0)
    if c_t0 is not None and c_tf is not None and c_tf < c_t0:
        raise JaxsysError(
            f"simulate: t_final={float(c_tf)} is before the context's time {float(c_t0)} (Drake: "
            f"'boundary_time >= context->get_time()' failed)."
        )


def start_events(
    program: EventProgram,
    context: Context,
    initialize: bool,
    updates_at_start: bool | Array,
    c_t0: Any,
    c_tf: Any,
    log_capacity: int,
) -> tuple[Context, Any, tuple[Any, ...]]:
    """Drake's ``Simulator::Initialize`` (when ``initialize``): initialization updates and publishes,
    then the per-step and periodic publishes due at the start and the monitor. Returns the context,
    the initialization publish values, and ``(program, periodic counters, logs, rest, counts,
    status)``. The one implementation of Initialize: ``simulate`` calls it inside its compiled run, the
    ``Simulator``'s ``initialize`` eagerly."""
    t0 = context.get_time()
    init_values: Any = ()
    status = EventStatus.did_nothing()
    counts_init = jnp.zeros((3,), jnp.int32)
    update_status = init_publish_status = status
    if initialize:
        context, init_values, status, counts_init, update_status, init_publish_status = program.initialize(context)
    k0 = program.init_counters(t0, updates_at_start, publishes_at_start=initialize)
    logs0 = program.allocate_logs(context, program.capacities(c_t0, c_tf, log_capacity))
    status0 = program.pack(status)
    counts0 = counts_init
    if initialize:
        # per-step publishes, periodic publishes due at the start time and the monitor belong to
        # Initialize (not after an update reached termination or failed, as Drake's; whatever the
        # initialization publishes returned: Drake dispatches them all together)
        gate = (
            jnp.array(True)
            if update_status.bound < REACHED_TERMINATION
            else ~EventProgram.stopped(program.pack(update_status))
        )
        k0, logs0, n_p, p_status = program.publishes(context, k0, gate, logs0, _right_now_publishes(program, context))
        status0 = EventProgram.fold(status0, program.pack(p_status))
        # Drake handles these and the initialization publishes in one HandlePublish: one publish
        # (counted as one dispatch when the combined status is success or termination: a failed
        # initialization publish makes the dispatch uncounted, as Drake's)
        counts0 = counts0.at[0].set(_applied(init_publish_status.keep_more_severe(p_status)))
    return context, init_values, (program, k0, logs0, get_rest(context), counts0, status0)


def _right_now(program: EventProgram, context: Context, kind: str) -> Array | None:
    """Event flags (one per witness, then one per timed event) of the timed events of ``kind``
    ("publish" or "update") that a leaf's ``do_calc_next_update_time`` schedules "right now" (at the
    context's time); None when no leaf schedules timed events.

    Drake's ``Initialize`` dispatches the right-now timed *publishes* with the per-step and periodic
    ones (its MissedPublishEventIssue13296 test) and leaves the right-now *updates* to the start of
    the first step; jaxsys does the same (the updates are passed to the loop as pending)."""
    timed = program.next_timed(context)
    if timed is None:
        return None
    t_c, due_c = timed
    t0 = context.get_time()
    now = t_c <= t0 + time_tolerance(t0)
    of_kind = jnp.asarray([(e.kind == "publish") == (kind == "publish") for e in program.timed], bool)
    return jnp.concatenate([jnp.zeros((len(program.witnesses),), bool), due_c & now & of_kind])


def _right_now_publishes(program: EventProgram, context: Context) -> Array | None:
    """The right-now timed publishes Initialize dispatches (see `_right_now`)."""
    return _right_now(program, context, "publish")


def _checked_record(record: Callable[[Context], Any]) -> Callable[[Context], Any]:
    """``record``, with a named error when it returns something that is not a pytree of arrays or
    numbers (a string gave NumPy's "data type 'hello' not understood" from deep inside the loop)."""

    def checked(context: Context) -> Any:
        out = record(context)
        for leaf in jax.tree_util.tree_leaves(out):
            if not isinstance(leaf, (jax.Array, np.ndarray, np.generic, int, float, complex, bool)):
                raise JaxsysError(
                    f"simulate: the record function returned a {type(leaf).__name__} ({leaf!r:.60}); it must "
                    f"return an array, a number or a pytree of them (e.g. lambda c: "
                    f"c.get_continuous_state_vector(), or an output port's eval(c))."
                )
        return out

    return checked


def _make_run(
    system: System,
    context: Context,
    integrator: IntegratorBase,
    record: Callable[[Context], Any],
    t_final: Any,
    ts: Array,
    progress: AbstractProgressMeter,
    saves_at_start: Any = None,
) -> Run:
    """The `Run` bundle: the vector field and what integrators need besides it. ``saves_at_start``:
    how many save times are at or before the start, when counted at the call (else the run counts)."""
    t0 = context.get_time()
    t_final_arr = jnp.asarray(t_final, t0.dtype)
    cs = context.get_continuous_state()

    # Diagrams of many distinct leaves, and large dynamics (a MuJoCo plant): evaluate RK stages in a
    # loop so the dynamics are traced and compiled once (identical leaves are one vmap: their stages
    # stay unrolled, which runs faster for small dynamics).
    f = system.vector_field(context)
    rolled = rolled_stages(system, f, t0, cs.x)
    aux = step_aux(system, context, rolled=rolled)
    aux["progress"] = (progress, progress.start(t0, t_final_arr))
    if saves_at_start is not None:
        aux["saves_at_start"] = saves_at_start
    return Run(system, context, integrator, f, aux, record, cs.x, t0, t_final_arr, ts)


def _finish(
    run: Run,
    raw: LoopOutput,
    program: EventProgram,
    init_values: Any,
    throw: bool,
    planned_t0: tuple[Array, float] | None,
    status0: Array | None = None,
) -> SimulationResult:
    """Check the loop's output (errors inside jit) and build the SimulationResult.

    Checks are attached to the few arrays a caller uses (final state, recorded values, status), not
    to the whole context: a diagram's context has arrays for every leaf."""
    if program and raw.event_status is None:
        raw = raw._replace(event_status=status0)
    # (None without events: an output XLA would build with a kernel of its own)
    event_status = raw.event_status if program else None
    reasons = tuple(program.reasons) if program else ()
    checked = (raw.t, raw.x, raw.ys, raw.status)
    if planned_t0 is not None:
        # The static step plan assumed a start time; a traced context must really start there.
        t0, t0_plan = planned_t0
        checked = eqx.error_if(
            checked,
            jnp.any(t0 != t0_plan),
            f"simulate: this fixed-step run was compiled for a start time of {t0_plan} s (the context's time "
            f"is traced, so the step count was planned from start_time); the context starts elsewhere. Pass "
            f"start_time=<the context's time> to simulate.",
        )
    if throw:
        n_base = len(STATUS_MESSAGES)
        dtype = run.context.get_time().dtype
        implicit = run.integrator.can_fail()
        messages = [status_message(i, dtype, implicit) for i in range(n_base)] + [
            _failure_message(STATUS_EVENT_FAILED, k, reasons, dtype, implicit) for k in range(len(reasons))
        ]
        which = (
            raw.status
            if event_status is None
            else jnp.where(
                (raw.status == STATUS_EVENT_FAILED) & (event_status[1] >= 0), n_base + event_status[1], raw.status
            )
        )
        checked = eqx.branched_error_if(checked, raw.status != STATUS_OK, which, messages)
    if throw and raw.segments is not None:
        capacity = raw.segments.capacity
        checked = eqx.error_if(
            checked,
            (raw.segments.taken > capacity) & (raw.status == STATUS_OK),
            f"simulate: the run took more steps than SaveAt(trajectory={capacity}) keeps; ask for more (or pass "
            f"throw=False: result.trajectory.complete() is then False and it ends early).",
        )
    t_end, x_end, ys, status = checked
    if program and program.can_stop and run.ts.shape[0]:
        # save times after the run stopped were not reached
        beyond = run.ts > t_end + time_tolerance(t_end)
        ys = jax.tree_util.tree_map(
            lambda y: (
                jnp.where(beyond.reshape((-1,) + (1,) * (y.ndim - 1)), jnp.nan, y)
                if jnp.issubdtype(y.dtype, jnp.inexact)
                else y
            ),
            ys,
        )
    final = run.context.with_time(t_end).with_continuous_state(x_end)
    if program:
        final = set_rest(final, raw.rest)
        counts = raw.counts
        sim_stats = SimulatorStatistics(raw.stats.counters, counts)
    else:
        sim_stats = SimulatorStatistics(raw.stats.counters, None)
    pending = (
        raw.pending if raw.pending is not None else (program.no_witness_flags() if program else jnp.zeros((0,), bool))
    )
    return SimulationResult(
        final,
        run.ts,
        ys,
        raw.stats,
        status,
        tuple(raw.logs),
        sim_stats,
        init_values,
        pending,
        event_status,
        run.t_final,
        _trajectory(run, raw.segments),
        reasons,
    )


def _trajectory(run: Run, segments: Any) -> DenseTrajectory | None:
    """The result's DenseTrajectory from the loop's segment buffer (None when not kept)."""
    if segments is None:
        return None
    integrator = run.integrator
    if isinstance(integrator.target_accuracy, jax.core.Tracer):  # (a static field must not hold a tracer)
        integrator = copy.copy(integrator)
        object.__setattr__(integrator, "target_accuracy", None)
    t, h, x, x_new, data = segments.segments(int(run.x0.shape[0]), run.x0.dtype, run.t0.dtype)
    return DenseTrajectory(t, h, x, x_new, data, segments.taken, integrator)
