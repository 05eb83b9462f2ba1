"""Drake's ``Simulator``: a thin, stateful wrapper around the pure [`simulate`][jaxsys.simulate].

Also re-exports what earlier versions of this module held (``simulate``, the result and statistics
classes, the status codes), so ``from jaxsys.analysis.simulator import simulate`` keeps working.

Imports: `simulate`, `event_loop`, `integrators`, `results`.
"""

from __future__ import annotations

import re
import time as _time
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context
from ..framework.drake_names import drake_name_error
from ..framework.errors import JaxsysError
from ..framework.event_status import EventStatus
from ..framework.system import System
from .compile_cache import SystemCache, deref
from .event_loop import EventProgram, PublishLog
from .integrators import IntegratorBase, RungeKutta3Integrator
from .results import (
    STATUS_EVENT_FAILED,
    STATUS_MAX_STEPS as STATUS_MAX_STEPS,
    STATUS_MESSAGES as STATUS_MESSAGES,
    STATUS_MIN_STEP as STATUS_MIN_STEP,
    STATUS_NONFINITE as STATUS_NONFINITE,
    STATUS_OK as STATUS_OK,
    IntegratorStatistics as IntegratorStatistics,
    SimulationResult as SimulationResult,
    SimulatorStatistics as SimulatorStatistics,
    SimulatorStatus as SimulatorStatus,
    SimulatorStatusReason as SimulatorStatusReason,
    Status as Status,
)
from .simulate import _right_now, simulate as simulate, start_events
from .witness_isolation import isolation_window


Array = jax.Array


_ADVANCE: SystemCache[Any] = SystemCache("Simulator.advance_to", maxsize=64)
_ADVANCE_TRACES = [0]  # how many times an advance was traced (tests check that reuse does not retrace)


class MutableContext:
    """What `Simulator.get_mutable_context` returns: a view of the simulator's current context.

    Reads (``get_time()``, ``get_continuous_state_vector()``, ...) see the current context. Calls of
    its ``with_*`` methods, and of Drake's setter names (``SetContinuousState(x)``, ``SetTime(t)``,
    ``set_continuous_state(x)``: mapped to ``with_*``), replace the simulator's context by their
    result, which they also return. ``get()`` returns the current [`Context`][jaxsys.Context] (pass that,
    not the view, to functions such as [`simulate`][jaxsys.simulate]).
    """

    __slots__ = ("_simulator",)

    def __init__(self, simulator: Simulator) -> None:
        object.__setattr__(self, "_simulator", simulator)

    def get(self) -> Context:
        """The current context."""
        return self._simulator._context

    def __getattr__(self, name: str) -> Any:
        ctx = self._simulator._context
        target = name
        if not hasattr(ctx, name):
            snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()
            for prefix in ("set_", "with_"):
                if snake.startswith(prefix) and hasattr(ctx, "with_" + snake[len(prefix) :]):
                    target = "with_" + snake[len(prefix) :]
                    break
            else:
                return getattr(ctx, name)  # raises, naming jaxsys's method for a Drake name
        value = getattr(ctx, target)
        if not (target.startswith("with_") and callable(value)):
            return value
        simulator = self._simulator

        def write_back(*args: Any, **kwargs: Any) -> Context:
            new = value(*args, **kwargs)
            simulator._system.validate_context(new)
            simulator._context = new
            return new

        return write_back

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"MutableContext.{name}: change the context through its with_* methods.")

    def __repr__(self) -> str:
        return f"MutableContext(of {self._simulator._system.get_system_id_string()}: {self.get()!r})"


class Simulator:
    """A thin, stateful Drake-style wrapper around [`simulate`][jaxsys.simulate] (Drake's ``Simulator``).

    ``Simulator(system, context=None, integrator=None, witness_isolation=True)``; ``initialize()``,
    ``advance_to(t)``, ``advance_pending_events()``,
    ``get_context()``, ``get_mutable_context()``, ``get_integrator()`` / ``get_mutable_integrator()``,
    ``reset_integrator(integrator)``, ``set_target_realtime_rate(rate)``, statistics. Each
    ``advance_to`` runs one compiled call (compiled once per system/integrator); the final context
    of one call is the start of the next, and updates left pending at its end (periodic, per-step and
    witness-triggered, as Drake's ``AdvanceTo``) are performed by the next.
    ``witness_isolation=False``: witness events fire at the end of the step in which the witness
    changed sign (Drake's behaviour without a context accuracy); see [`simulate`][jaxsys.simulate].
    """

    def __getattr__(self, name: str) -> Any:
        # only reached when normal lookup fails: Drake's CamelCase names get an error naming ours
        raise drake_name_error(self, name)

    def __init__(
        self,
        system: System,
        context: Context | None = None,
        integrator: IntegratorBase | None = None,
        witness_isolation: bool = True,
    ):
        self._system = system
        self._witness_isolation = witness_isolation
        self._context: Any = context if context is not None else system.create_default_context()
        system.validate_context(self._context)
        self._integrator = integrator or RungeKutta3Integrator(max_step_size=0.1, target_accuracy=1e-4)
        self._rate = 0.0
        self._initialized = False
        self._stats: dict[str, float] = {}
        self._updates_at_start = True
        self._pending: Any = None  # witnesses whose updates are pending (from the last advance_to)
        self._last_result: SimulationResult | None = None
        self._init_publishes: Any = ()
        self._init_logs: Any = ()
        self._log_parts: list[tuple[Any, ...]] = []  # publish logs of the start and of every advance_to
        self._wall_start = 0.0
        self._sim_start = 0.0
        self._monitor: Any = None
        self._ideal_step = float("nan")  # error control's next step, kept between advances (Drake's)

    def _advance_fn(self, zero_length: bool = False) -> Any:
        """The compiled advance for this configuration, shared by every Simulator of the same system
        and integrator (a new Simulator on the same diagram does not recompile). Whether the updates
        due at the start are performed is an argument (False after a step of zero length): the
        advance after `advance_pending_events` reuses the compiled program."""
        key = (self._integrator, self._witness_isolation, self._monitor, zero_length)
        integrator, isolation, monitor = self._integrator, self._witness_isolation, self._monitor

        def build(ref: Any) -> Any:
            # (the compiled advance reaches the system through a weak reference: a dropped system is
            # freed with it)
            def advance(
                context: Context, t_final: Array, pending: Any, h0: Array, updates_at_start: Array
            ) -> SimulationResult:
                _ADVANCE_TRACES[0] += 1
                return simulate(
                    deref(ref),
                    context,
                    t_final,
                    integrator,
                    initialize=False,
                    updates_at_start=updates_at_start,
                    pending_witness_events=pending,
                    witness_isolation=isolation,
                    monitor=monitor,
                    at_least_one_step=zero_length,
                    initial_step_size=h0,
                    # (the Simulator raises itself, after keeping the context and statistics where the
                    # run stopped, as Drake's does; its message then says when)
                    throw=False,
                )

            # (filter_jit: run-time errors arrive as a clean EquinoxRuntimeError)
            return eqx.filter_jit(advance)

        return _ADVANCE.get(self._system, key, build)

    def initialize(self) -> SimulatorStatus:
        """Run the initialization events, then publishes due at the start time and the monitor
        (Drake: ``Initialize``). Called by the first `advance_to` if not called before.

        Returns a [`SimulatorStatus`][jaxsys.SimulatorStatus] (reached termination if a handler or the monitor
        said so); a failed handler raises an error naming its system and message, as Drake's."""
        self._require_context("initialize")
        program = EventProgram(self._system, self._context, self._monitor)
        self._pending = program.no_witness_flags(np)  # (no eager array operation)
        t0 = float(self._context.get_time())
        packed = np.array([0, -1])
        self._stats = {}  # (Drake's Initialize resets the statistics, then counts its own events)
        if program:
            # Drake's Initialize, the same code as simulate's (start_events): initialization updates and
            # publishes, then the per-step, periodic and right-now timed publishes due at the start and
            # the monitor, all dispatched together (only an update's termination or failure stops them)
            # (eagerly, at JAX's default precision: under full_precision() its small eager programs were
            # compiled a second time, in another configuration than the same operations elsewhere)
            context, self._init_publishes, events = start_events(program, self._context, True, True, t0, None, 1)
            _, _, self._init_logs, _, counts, status = events
            packed = np.asarray(status)
            now = _right_now(program, context, "update")
            if now is not None:  # (right-now timed updates: at the first step's start, as Drake's)
                self._pending = self._pending | now
            self._context = context
            for name, n in (
                ("num_publishes", int(counts[0])),
                ("num_discrete_updates", int(counts[1])),
                ("num_unrestricted_updates", int(counts[2])),
            ):
                if n:
                    self._stats[name] = n
        self._log_parts = [tuple(self._init_logs)]
        self._initialized = True
        self._updates_at_start = True
        self._ideal_step = float("nan")  # (Drake's Initialize re-initializes the integrator)
        self._wall_start = _time.perf_counter()
        self._sim_start = t0
        return self._status_from(packed, tuple(program.reasons), t0, t0, "Simulator.initialize")

    def _status_from(
        self, packed: Any, reasons: tuple[tuple[str, str], ...], boundary: float, reached: float, where: str
    ) -> SimulatorStatus:
        """The SimulatorStatus of a packed event status; raises on failure (Drake throws)."""
        severity, which = (0, -1) if packed is None else (int(v) for v in np.asarray(packed)[:2])
        system, message = reasons[which] if 0 <= which < len(reasons) else ("", "")
        if severity >= EventStatus.FAILED:
            status = SimulatorStatus(SimulatorStatusReason.EVENT_HANDLER_FAILED, boundary, reached, system, message)
            self._last_status = status
            raise JaxsysError(f"{where}: {status.format_message()}")
        reason = (
            SimulatorStatusReason.REACHED_TERMINATION_CONDITION
            if severity == EventStatus.REACHED_TERMINATION
            else SimulatorStatusReason.REACHED_BOUNDARY_TIME
        )
        self._last_status = SimulatorStatus(reason, boundary, reached, system, message)
        return self._last_status

    def advance_to(self, boundary_time: float) -> SimulatorStatus:
        """Advance the context to ``boundary_time`` (Drake: ``AdvanceTo``); returns a
        [`SimulatorStatus`][jaxsys.SimulatorStatus] (the new context is `get_context`).

        Updates due exactly at ``boundary_time`` stay pending (performed by the next ``advance_to``
        or by `advance_pending_events`); publishes due then are done. ``advance_to`` the current
        time takes one step of zero length, which performs the updates due now, then the per-step
        publishes and the monitor (``advance_to(t0)`` after creation sees the state after the start
        time's updates), as every call of Drake's ``AdvanceTo`` takes at least one step. An event
        handler or the monitor that reaches termination stops the advance early (the status says when and why; a later
        ``advance_to`` goes on from there, as Drake's); one that fails raises an error naming the
        system and message.
        """
        if not self._initialized:
            status = self.initialize()
            if status.reached_termination():
                return status
        t = float(self._context.get_time())
        dtype = self._context.time.dtype
        # (compared in the context's dtype: in float32, advance_to(0.1) twice is the same time, not a
        # step backwards from float32(0.1) = 0.10000000149)
        b = float(np.asarray(boundary_time, dtype))
        if b < t:
            raise JaxsysError(
                f"Simulator.advance_to({boundary_time}): the context is already at t={t}; time cannot go backwards."
            )
        zero_length = b == t
        # (Drake's AdvanceTo takes at least one step: to the time it is at, a step of zero length that
        # performs the updates due now, then the per-step publishes and the monitor)
        fn = self._advance_fn(zero_length)
        # (error control goes on with the step it asked for at the end of the last advance, as Drake's
        # integrator keeps its ideal next step; NaN: the integrator's initial step)
        h0 = jnp.asarray(self._ideal_step, dtype)
        result = fn(
            self._context, jnp.asarray(boundary_time, dtype), self._pending, h0, jnp.asarray(self._updates_at_start)
        )
        self._last_result = result
        self._log_parts.append(tuple(result.publish_logs))
        self._pending = result.pending_witness_events
        self._context = result.context
        stats = result.stats.as_dict()  # (read on the host once)
        ideal = float(stats["ideal_next_step_size"])
        if not zero_length and np.isfinite(ideal):
            self._ideal_step = ideal
        # (a step of zero length performed the periodic updates due now: the next step does not repeat them)
        self._updates_at_start = not zero_length
        for k, v in stats.items():
            if k.startswith("num_"):
                self._stats[k] = self._stats.get(k, 0) + v
            else:
                self._stats[k] = v
        for k, v in result.simulator_stats.as_dict().items():
            if k != "num_steps_taken":
                self._stats[k] = self._stats.get(k, 0) + v
        reached = float(self._context.get_time())
        code = int(result.status)
        if code not in (STATUS_OK, STATUS_EVENT_FAILED):
            raise JaxsysError(f"Simulator.advance_to({boundary_time}) stopped at time {reached}: {result.message()}")
        status = self._status_from(
            result.event_status,
            result.status_reasons,
            float(boundary_time),
            reached,
            f"Simulator.advance_to({boundary_time})",
        )
        if self._rate > 0:
            target_wall = (reached - self._sim_start) / self._rate
            elapsed = _time.perf_counter() - self._wall_start
            if target_wall > elapsed:
                _time.sleep(target_wall - elapsed)
        return status

    def advance_pending_events(self) -> SimulatorStatus:
        """Perform the updates due at the current time (Drake: ``AdvancePendingEvents``); returns a
        [`SimulatorStatus`][jaxsys.SimulatorStatus].

        As Drake's, this is ``advance_to(current time)``: one step of zero length, which performs the
        updates due now (periodic, per-step, and those of witnesses that triggered at the end of the
        last step), then the per-step publishes and the monitor, and counts as a step."""
        if not self._initialized:
            status = self.initialize()
            if status.reached_termination():
                return status
        return self.advance_to(float(self._context.get_time()))

    def set_monitor(self, monitor: Any) -> None:
        """Call ``monitor(context) -> EventStatus or None`` at the end of every step, after its
        publishes, and at initialization (Drake: ``set_monitor``). Its ``reached_termination`` stops
        ``advance_to`` there; ``failed`` raises. Pure (it is traced)."""
        if monitor is not None and not callable(monitor):
            raise JaxsysError(f"Simulator.set_monitor: expected a function f(context) -> EventStatus; got {monitor!r}.")
        self._monitor = monitor

    def clear_monitor(self) -> None:
        """Remove the monitor (Drake: ``clear_monitor``)."""
        self._monitor = None

    def get_monitor(self) -> Any:
        """The monitor, or None (Drake: ``get_monitor``)."""
        return self._monitor

    def get_publish_log(self, event: Any) -> PublishLog:
        """The log of one per-step or periodic publish event (an Event, or its name) over the whole
        simulation so far: the sample at the start time (taken by `initialize`, as Drake's
        ``Initialize`` publishes) followed by every ``advance_to``'s samples. Concrete values
        (``sample_times()``, ``data()``). Drake: the log a ``VectorLogSink`` keeps in the Simulator's
        context (``FindLog(simulator.get_context())``); ``sink.find_log(simulator)`` reads this."""
        parts = [log for logs in self._log_parts for log in logs if _is_log_of(log, event)]
        if not parts:
            names = sorted({log.name for logs in self._log_parts for log in logs})
            raise JaxsysError(
                f"Simulator.get_publish_log: no publish log for {event!r}; logs are kept for per-step and "
                f"periodic publish events: {names}" + ("" if self._log_parts else " (nothing simulated yet)") + "."
            )
        times = np.concatenate([np.asarray(log.sample_times()) for log in parts])
        values = jax.tree_util.tree_map(
            lambda *vs: np.concatenate([np.asarray(v) for v in vs]), *[log.data() for log in parts]
        )
        return PublishLog(
            jnp.asarray(times), values, jnp.asarray(len(times), jnp.int32), parts[0].name, parts[0].event_uid
        )

    def get_last_result(self) -> SimulationResult | None:
        """The SimulationResult of the last ``advance_to`` (publish logs, statistics)."""
        return self._last_result

    def get_context(self) -> Context:
        """The current context (Drake: ``get_context``); an error when the Simulator has none
        (after ``reset_context(None)``)."""
        return self._require_context("get_context")

    def _require_context(self, where: str) -> Context:
        if self._context is None:
            raise JaxsysError(
                f"Simulator.{where}(): Context has not been set (it was released with reset_context(None)); "
                f"give one with reset_context(system.create_default_context())."
            )
        return self._context

    def get_mutable_context(self) -> MutableContext:
        """The simulator's context, changed in place as in Drake (``get_mutable_context``).

        Contexts are values; this returns a [`MutableContext`][jaxsys.MutableContext] view whose ``with_*`` methods (and
        Drake's setter names: ``SetContinuousState``, ``SetTime``, ...) store their result as the
        simulator's context, so ``simulator.get_mutable_context().with_continuous_state(x)`` does what
        the Drake idiom does. Everything else reads the current context; ``.get()`` is the Context.
        """
        return MutableContext(self)

    def reset_context(self, context: Context | None) -> None:
        """Replace the context (Drake: ``reset_context``); None leaves the Simulator without one
        (``has_context()`` False; Drake allows an empty Simulator too) until the next
        ``reset_context``. Either way the next ``advance_to`` initializes again."""
        if context is not None:
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
        return integrator

    def set_target_realtime_rate(self, rate: float) -> None:
        """Pace ``advance_to`` to ``rate`` x wall-clock time (1.0 = real time; 0 = as fast as possible)."""
        self._rate = max(0.0, float(rate))
        self._wall_start = _time.perf_counter()
        self._sim_start = self._now()

    def get_target_realtime_rate(self) -> float:
        """Drake: ``get_target_realtime_rate``."""
        return self._rate

    def get_actual_realtime_rate(self) -> float:
        """Simulated time advanced per second of wall-clock time since `initialize`,
        `reset_statistics` or `set_target_realtime_rate` (Drake:
        ``get_actual_realtime_rate``); NaN before `initialize` (as Drake's, whose start time is
        then unset), 0 before any simulated time has passed. Compilation of the first ``advance_to``
        counts as wall time, as any other delay does."""
        if not self._initialized:
            return float("nan")
        wall = _time.perf_counter() - self._wall_start
        sim = float(self._context.get_time()) - self._sim_start
        return sim / wall if wall > 0 and sim > 0 else 0.0

    def reset_statistics(self) -> None:
        """Zero the accumulated statistics and restart the realtime-rate clock at the current times
        (Drake: ``ResetStatistics``)."""
        self._stats = {}
        self._wall_start = _time.perf_counter()
        self._sim_start = self._now()

    def _now(self) -> float:
        """The context's time, s (NaN without a context)."""
        return float(self._context.get_time()) if self._context is not None else float("nan")

    def get_current_witness_time_isolation(self) -> float | None:
        """The width, s, to which witness crossings are isolated now (Drake:
        ``GetCurrentWitnessTimeIsolation``): with an accuracy ``a`` on the context, ``0.01 a`` times
        the characteristic time (1 s with error control, the maximum step in fixed-step mode), at
        least the time's resolution. None when the context has no accuracy: jaxsys then isolates each
        crossing to ``step * 2**-witness_iterations`` of the step it is in (Drake does not isolate in
        fixed-step mode, and refuses with error control)."""
        context = self._require_context("get_current_witness_time_isolation")
        accuracy = context.get_accuracy()
        if accuracy is None:
            return None
        t = jnp.asarray(context.get_time())
        scale = self._integrator.max_step_size if self._integrator.get_fixed_step_mode() else 1.0
        return float(isolation_window(t, jnp.zeros((), t.dtype), 0, accuracy, scale))

    def has_context(self) -> bool:
        """Whether the Simulator holds a context (Drake: ``has_context``): False only after
        ``reset_context(None)``."""
        return self._context is not None

    def get_statistics(self) -> dict[str, float]:
        """Accumulated integrator statistics (counts summed over ``advance_to`` calls)."""
        return dict(self._stats)

    def get_num_steps_taken(self) -> int:
        """Steps taken since the statistics were last reset (Drake: ``get_num_steps_taken``)."""
        return int(self._stats.get("num_steps_taken", 0))

    def get_num_publishes(self) -> int:
        """Publish events handled (initialization, per-step, periodic, timed, witness) since the
        statistics were last reset (Drake: ``get_num_publishes``)."""
        return int(self._stats.get("num_publishes", 0))

    def get_num_discrete_updates(self) -> int:
        """Discrete-update dispatches since the statistics were last reset (Drake:
        ``get_num_discrete_updates``)."""
        return int(self._stats.get("num_discrete_updates", 0))

    def get_num_unrestricted_updates(self) -> int:
        """Unrestricted-update dispatches since the statistics were last reset (Drake:
        ``get_num_unrestricted_updates``)."""
        return int(self._stats.get("num_unrestricted_updates", 0))

    def get_system(self) -> System:
        """Drake: ``get_system``."""
        return self._system


def _is_log_of(log: PublishLog, event: Any) -> bool:
    return (log.name == event) if isinstance(event, str) else (log.event_uid == getattr(event, "uid", None))
