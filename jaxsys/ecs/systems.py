"""ECS systems, UpdateInfo and the phase runner (gz-sim's System, UpdateInfo, SimulationRunner).

A system subclasses `EcsSystem` and implements the phases it needs:

* ``configure(world) -> world`` once before running (gz-sim ``Configure``);
* ``pre_update(info, world) -> world`` (read-write: controls, spawning);
* ``update(info, world) -> world`` (read-write: physics);
* ``post_update(info, view) -> outputs`` (read-only: ``view`` is a `WorldView`; the outputs are
  collected per step);
* ``reset(info, world) -> world``.

Each step: UpdateInfo is advanced first (``sim_time`` is the time reached after PreUpdate and
Update: 0 on a paused start, ``dt`` on an unpaused one; paused steps have dt = 0 and change neither
``sim_time`` nor ``iterations``), then all PreUpdates in priority order (smaller first, ties in the
order added), all Updates likewise, all PostUpdates, then the world's end of step. A system only
changes components of entities that have all its ``requires`` components (and entities it creates):
the runner discards other changes. `run` is one ``lax.scan`` of gz-sim's runner loop: each pass
updates the info, runs the phases, pauses at a run-to time or at the end of a multi-step, applies the
world-control requests the systems made (``world.request_pause()`` etc.), and ends the step; a reset
request makes the next pass a reset pass (the ``reset`` phase only, on the run's initial world).
`TestFixture` is gz-sim's test fixture; `system_order` its SystemManager's view.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from ..framework.errors import JaxsysError
from .world import NULL_ENTITY, Column, Control, World, WorldView, _select_rows, creating_as, recording_writes


USER_COMMANDS_PRIORITY = -16384
PRE_PHYSICS_PRIORITY = -128
PHYSICS_PRIORITY = -64
POST_PHYSICS_SENSOR_PRIORITY = -32
DEFAULT_PRIORITY = 0

_NS = 1_000_000_000


class UpdateInfo(eqx.Module):
    """gz-sim's UpdateInfo with time as integers (seconds + nanoseconds: exact, no drift, no x64 needed).

    **Fields:** `sim_sec`, `sim_nsec` (the simulation time), `dt_ns`, `iterations`, `paused`,
    `real_time` (seconds of wall time, as measured by the caller; 0 inside a compiled run).
    """

    sim_sec: jax.Array
    sim_nsec: jax.Array
    dt_ns: jax.Array
    iterations: jax.Array
    paused: jax.Array
    real_time: jax.Array

    @staticmethod
    def start(paused: Any = True) -> UpdateInfo:
        """The info before the first step."""
        z = jnp.zeros((), jnp.int32)
        return UpdateInfo(z, z, z, z, jnp.asarray(paused), jnp.zeros((), jnp.result_type(float)))

    @property
    def sim_time(self) -> jax.Array:
        """Simulation time, s (float)."""
        return self.sim_sec + self.sim_nsec / 1e9

    @property
    def dt(self) -> jax.Array:
        """Time handled in this step, s (0 while paused)."""
        return self.dt_ns / 1e9

    def advanced(self, paused: Any, step_ns: int) -> UpdateInfo:
        """The info for the next step (gz-sim ``UpdateCurrentInfo``)."""
        paused = jnp.asarray(paused)
        dt = jnp.where(paused, 0, step_ns).astype(jnp.int32)
        nsec = self.sim_nsec + dt
        return UpdateInfo(
            self.sim_sec + nsec // _NS,
            nsec % _NS,
            dt,
            self.iterations + (~paused).astype(jnp.int32),
            paused,
            self.real_time,
        )


class EcsSystem(eqx.Module):
    """Base class of ECS systems (gz-sim ``System`` with its ``ISystem*`` interfaces).

    Class attributes: ``priority`` (smaller runs first; gz-sim's constants are in this module) and
    ``requires`` (component names an entity needs for this system to act on it).
    """

    priority: ClassVar[int] = DEFAULT_PRIORITY
    requires: ClassVar[tuple[str, ...]] = ()

    def required_components(self) -> tuple[str, ...]:
        """The components an entity needs for this system to act on it (default: ``requires``)."""
        return tuple(self.requires)

    def get_owner(self) -> Any:
        """The entity this system is attached to (gz-sim passes it to ``Configure``): a subclass
        declares an ``owner`` field holding a handle; default ``NULL_ENTITY`` (the world)."""
        return getattr(self, "owner", NULL_ENTITY)

    def configure(self, world: World) -> World:
        """Called once by `configure` before running."""
        return world

    def pre_update(self, info: UpdateInfo, world: World) -> World:
        """Read-write, before physics."""
        return world

    def update(self, info: UpdateInfo, world: World) -> World:
        """Read-write: the physics step."""
        return world

    def post_update(self, info: UpdateInfo, view: WorldView) -> Any:
        """Read-only: return outputs (any pytree)."""
        return None

    def reset(self, info: UpdateInfo, world: World) -> World:
        """Called by `reset`."""
        return world


def _implements(system: EcsSystem, phase: str) -> bool:
    return getattr(type(system), phase) is not getattr(EcsSystem, phase)


def _ordered(systems: Sequence[EcsSystem], phase: str) -> list[EcsSystem]:
    chosen = [(s.priority, i, s) for i, s in enumerate(systems) if _implements(s, phase)]
    return [s for _, _, s in sorted(chosen, key=lambda t: (t[0], t[1]))]


def _guarded(system: EcsSystem, before: World, after: World, writes: dict[int, tuple[Any, ...]] | None = None) -> World:
    """Keep only changes to entities having the system's required components (or created by it).
    ``writes``: the phase's `World.apply` writes (`recording_writes`); an array last written by an
    ``apply`` whose mask required all the required components, computed from ``before``'s very
    ``alive`` and ``present`` arrays, lies inside the guard's mask and is kept without a select."""
    if not isinstance(after, World):
        raise JaxsysError(
            f"{type(system).__name__} must return the World from its pre_update/update; got {type(after).__name__}."
        )
    required = system.required_components()
    if not required:
        return after
    allowed = before.each(required)
    if after.alive is not before.alive:
        allowed = allowed | (after.alive & ~before.alive)

    def inside(new: Array, old: Array) -> bool:
        # (written once, by an apply into the phase's input array, on a mask inside the guard's)
        entry = (writes or {}).get(id(new))
        if entry is None or entry[0] is not new or entry[1] is not old or not set(required) <= entry[2]:
            return False
        alive, present = entry[3], entry[4]
        return alive is before.alive and all(present.get(r) is before.components[r].present for r in required)

    def kept(new: Array, old: Array) -> Array:
        return new if inside(new, old) else _kept_where(allowed, new, old)

    comps = {}
    for name, col in after.components.items():
        old = before.components[name]
        # (what the phase did not touch is the very same array: no pass over it)
        comps[name] = Column(kept(col.data, old.data), kept(col.present, old.present), kept(col.changed, old.changed))
    return dataclasses.replace(after, components=comps)


def _kept_where(allowed: Array, new: Array, old: Array) -> Array:
    """``new`` where ``allowed`` (per entity), else ``old``; ``new`` itself when it is ``old``."""
    if new is old:
        return new
    return _select_rows(allowed, new, old)


def _owner_exists(system: EcsSystem, world: World) -> Array | None:
    """Whether the entity that owns ``system`` exists (None for a system of the world itself)."""
    owner = system.get_owner()
    if isinstance(owner, (int, np.integer)) and int(owner) == NULL_ENTITY:
        return None
    return world.exists(owner)


def _if_owned(system: EcsSystem, world: World, fn: Callable[[World], World]) -> World:
    """``fn(world)``, or ``world`` unchanged once the system's owner entity is gone (gz-sim's
    SystemManager removes the systems of a removed entity; a handle never names a later entity)."""
    alive = _owner_exists(system, world)
    if alive is None:
        return fn(world)
    return jax.lax.cond(alive, fn, lambda w: w, world)


def _run_phase(system: EcsSystem, phase: str, info: UpdateInfo, world: World) -> World:
    """``system``'s ``phase`` (pre_update, update: its changes kept to the entities it acts on; reset)."""
    if phase == "reset":
        return system.reset(info, world)
    with recording_writes() as writes:
        after = getattr(system, phase)(info, world)
    return _guarded(system, world, after, writes)


def _phases(world: World, info: UpdateInfo, systems: Sequence[EcsSystem]) -> tuple[World, tuple[Any, ...]]:
    """PreUpdates, Updates (priority order), PostUpdates (their outputs). A system whose owner entity
    no longer exists does nothing (its post_update outputs are zeros)."""
    for phase in ("pre_update", "update"):
        for s in _ordered(systems, phase):
            with creating_as(f"{type(s).__name__}.{phase}"):
                world = _if_owned(s, world, functools.partial(_run_phase, s, phase, info))
    view = WorldView(world)
    outputs = []
    for s in systems:  # PostUpdate order is irrelevant (gz-sim runs them in parallel)
        if _implements(s, "post_update"):
            out = s.post_update(info, view)
            alive = _owner_exists(s, world)
            if alive is not None:
                out = jax.tree_util.tree_map(lambda x, a=alive: jnp.where(a, x, jnp.zeros_like(x)), out)
            if any(
                isinstance(x, (World, WorldView))
                for x in jax.tree_util.tree_leaves(out, is_leaf=lambda x: isinstance(x, (World, WorldView)))
            ):
                raise JaxsysError(
                    f"{type(s).__name__}.post_update returned a World: PostUpdate is read-only; change the world in "
                    f"pre_update or update."
                )
            outputs.append(out)
    return world, tuple(outputs)


def step(
    world: World, info: UpdateInfo, systems: Sequence[EcsSystem], paused: Any, step_ns: int
) -> tuple[World, UpdateInfo, tuple[Any, ...]]:
    """One simulation step: advance info, PreUpdates, Updates, PostUpdates, end of step (world-control
    requests are left in ``world.control``; `run` applies them)."""
    info = info.advanced(paused, step_ns)
    world, outputs = _phases(world, info, systems)
    return world.end_of_step(), info, outputs


class RunnerState(eqx.Module):
    """The runner's own state between steps (gz-sim's SimulationRunner): `paused`, `pending` (steps
    left of a multi-step), `run_to` (int32 [sec, nsec] to pause at; [-1, 0] none), `rewind` (the next
    pass is a reset)."""

    paused: jax.Array
    pending: jax.Array
    run_to: jax.Array
    rewind: jax.Array


def _time_reached(info: UpdateInfo, run_to: jax.Array) -> jax.Array:
    return (run_to[0] >= 0) & (
        (info.sim_sec > run_to[0]) | ((info.sim_sec == run_to[0]) & (info.sim_nsec >= run_to[1]))
    )


def _runner_pass(
    world: World,
    info: UpdateInfo,
    rs: RunnerState,
    systems: Sequence[EcsSystem],
    step_ns: int,
    initial: World,
    forced_pause: Any,
    outputs_shape: Any,
    can_reset: bool = True,
    recreates: bool = False,
    lean: bool = False,
) -> tuple[World, UpdateInfo, RunnerState, tuple[Any, ...]]:
    """One iteration of gz-sim's ``SimulationRunner::Run`` loop: update the info (or rewind it), run
    the phases (or, on a reset pass, only the systems' ``reset``), pause at a run-to time or the end
    of a multi-step, apply the systems' world-control requests, end the step (``lean``: a pass that
    creates, removes, re-parents and pins nothing, from a settled world: only change flags to clear)."""
    paused = rs.paused if forced_pause is None else jnp.asarray(forced_pause, bool)

    def zeros() -> Any:
        return jax.tree_util.tree_map(lambda sd: jnp.zeros(sd.shape, sd.dtype), outputs_shape)

    def normal(w: World) -> tuple[World, UpdateInfo, Any]:
        i = info.advanced(paused, step_ns)
        w, out = _phases(w, i, systems)
        return w, i, out

    def rewind(w: World) -> tuple[World, UpdateInfo, Any]:
        i = UpdateInfo.start(paused)
        w = w.reset_to(initial)
        for s in _ordered(systems, "reset"):
            w = _if_owned(s, w, functools.partial(_run_phase, s, "reset", i))
        return w, i, zeros()

    if can_reset:
        world, info, outputs = jax.lax.cond(rs.rewind, rewind, normal, world)
    else:
        world, info, outputs = normal(world)
    c = world.control
    # run to a time, or a multi-step, ends paused (gz-sim's Step after UpdateSystems)
    reached = ~paused & _time_reached(info, rs.run_to)
    paused_next = paused | reached
    run_to = jnp.where(reached, jnp.array([-1, 0], jnp.int32), rs.run_to)
    stepping = ~paused & (rs.pending > 0)
    pending = jnp.where(stepping, rs.pending - 1, rs.pending)
    paused_next = paused_next | (stepping & (pending <= 0))
    # the systems' requests (gz-sim's ProcessWorldControl): play/pause, then a multi-step while paused
    paused_next = jnp.where(c.pause >= 0, c.pause > 0, paused_next)
    start_steps = paused_next & (c.multi_step > 0)
    pending = jnp.where(start_steps, pending + c.multi_step, pending)
    paused_next = paused_next & ~start_steps
    world = world._end_of_step_changes_only() if lean else world.end_of_step()
    if recreates:
        # gz-sim's ProcessRecreateEntities: a copy of each entity asked for, new in the next step,
        # and the original removed at its end (``each_removed`` reports it during that step)
        world = world.process_recreate()
    rs_next = RunnerState(paused_next, pending, run_to, c.reset)
    return (
        dataclasses.replace(world, control=_kept(c.requests_cleared(), rs_next, c.stopped | c.stop)),
        info,
        rs_next,
        outputs,
    )


def _kept(control: Control, rs: RunnerState, stopped: Any) -> Control:
    """``control`` holding the runner's state ``rs`` and ``stopped`` (what the next run goes on from)."""
    return dataclasses.replace(
        control,
        stopped=jnp.asarray(stopped, bool),
        runner_paused=jnp.asarray(rs.paused, jnp.int32),
        runner_pending=jnp.asarray(rs.pending, jnp.int32),
        runner_run_to=jnp.asarray(rs.run_to, jnp.int32),
    )


def _entry_state(
    world: World, paused: Any, run_to_sim_time: float | None, multi_step: int
) -> tuple[World, RunnerState, jax.Array]:
    """The runner's state at a run's start: the world's (its last run's: paused, multi-step left,
    run-to time) unless the arguments set them, then the requests made on the world since (pause or
    play, multi-step, reset, stop) applied as gz-sim applies a step's requests; the world with the
    requests cleared, and the paused state of the first pass's info."""
    c = world.control
    was = c.runner_paused
    if paused is None:
        start_paused = was > 0  # (-1, no run yet: playing)
    else:
        start_paused = jnp.asarray(paused, bool)
    pending = jnp.where(was >= 0, c.runner_pending, 0).astype(jnp.int32)
    run_to = jnp.where(was >= 0, c.runner_run_to, jnp.array([-1, 0], jnp.int32))
    if run_to_sim_time is not None:
        ns = int(round(float(run_to_sim_time) * _NS))
        run_to = jnp.array([ns // _NS, ns % _NS], jnp.int32)
        start_paused = jnp.asarray(False)
    multi = jnp.asarray(multi_step, jnp.int32)
    start_paused = start_paused & ~(multi > 0)
    pending = pending + multi
    # requests made on the world between runs (gz-sim: a WorldControl message between steps)
    start_paused = jnp.where(c.pause >= 0, c.pause > 0, start_paused)
    steps = start_paused & (c.multi_step > 0)
    pending = jnp.where(steps, pending + c.multi_step, pending)
    start_paused = start_paused & ~steps
    rs = RunnerState(start_paused, pending, run_to, jnp.asarray(c.reset, bool))
    world = dataclasses.replace(world, control=_kept(c.requests_cleared(), rs, c.stopped | c.stop))
    return world, rs, start_paused


def run(
    world: World,
    systems: Sequence[EcsSystem] | SystemManager,
    num_steps: int,
    step_size: float = 1e-3,
    paused: Any = None,
    info: UpdateInfo | None = None,
    run_to_sim_time: float | None = None,
    multi_step: int = 0,
    initial_world: World | None = None,
) -> tuple[World, UpdateInfo, tuple[Any, ...]]:
    """Run ``num_steps`` passes of gz-sim's runner loop as one ``lax.scan``.

    **Arguments:**
    - `paused`: start paused (a bool, possibly traced), or a bool array of length ``num_steps``
      that forces the paused state of each step (an external schedule; the runner's own pause state
      is then not used). Default: go on as the world's last run left the runner (paused after a
      run-to time or a pause request, a multi-step's remaining steps, a pending run-to time), as
      gz-sim's runner keeps its state between steps; playing for a world that has not run.
    - `step_size`: s; kept as integer nanoseconds.
    - `info`: continue from this UpdateInfo (default: a fresh start).
    - `run_to_sim_time`: play until the simulation time reaches this (s), then pause (gz-sim
      WorldControl ``run_to_sim_time``).
    - `multi_step`: while paused, take this many steps and pause again (WorldControl ``multi_step``).
    - `initial_world`: the world a reset request rewinds to (default: ``world``).

    Systems may request pause / play / multi-step / reset / stop from ``pre_update`` or ``update``
    (``world.request_pause()`` etc.); the runner applies them at the end of that step, in gz-sim's
    order. The same requests made on the world between runs are applied before this run's first
    pass (a reset makes it a reset pass; a stop ends the run before it steps). A reset pass runs only
    the systems' ``reset`` phase (its outputs are zeros); after a stop the remaining passes change
    nothing (their outputs are zeros) and ``world.control.stopped`` is set.

    Returns (final world, final info, outputs): one entry per system with ``post_update``, each with a
    leading axis of length ``num_steps``.
    """
    if isinstance(systems, SystemManager):
        # the activation step: systems added since the last run join now (gz-sim's runner
        # activates pending systems at the start of a step)
        systems.activate_pending_systems()
        systems = list(systems.active)
    if not isinstance(num_steps, (int, np.integer)) or isinstance(num_steps, bool) or num_steps < 0:
        raise JaxsysError(f"run: num_steps must be an int >= 0 (a static count of passes); got {num_steps!r}.")
    step_ns = int(round(step_size * _NS))
    if not 0 < step_ns < 2**31:
        raise JaxsysError(f"run: step_size must be in (0, 2.1) s; got {step_size}.")
    schedule = None
    if paused is not None and jnp.ndim(paused) != 0:
        schedule = jnp.asarray(paused, bool)
        if schedule.shape != (num_steps,):
            raise JaxsysError(
                f"run: paused must be a bool or a bool array of length num_steps={num_steps}; got shape "
                f"{schedule.shape}."
            )
    initial = world if initial_world is None else initial_world
    # (whether requests made on the world before this run may be pending: unknown under jit)
    entry_reset = _concrete_true(world.control.reset)
    entry_stop = _concrete_true(world.control.stop) or _concrete_true(world.control.stopped)
    given = world
    first = paused if schedule is None else (schedule[0] if num_steps else jnp.asarray(True))
    world, rs, start_paused = _entry_state(world, first, run_to_sim_time, multi_step)
    if info is None:
        info = UpdateInfo.start(start_paused)
    # one abstract trace of the phases: the outputs' shapes, and whether any system can request a
    # reset or a stop at all (an untouched request is the very input array), so runs without those
    # requests carry no reset or stop logic (under vmap it would be computed every step)
    touched: dict[str, bool] = {}

    def probe(w: World, i: UpdateInfo) -> Any:
        w2, out = _phases(w, i.advanced(False, step_ns), systems)
        touched["reset"] = w2.control.reset is not w.control.reset
        touched["stop"] = w2.control.stop is not w.control.stop
        touched["recreate"] = w2.recreating is not w.recreating
        # the arrays end_of_step settles: a run whose systems leave them all as they are (no
        # entity created, removed, re-parented or pinned, no component created or removed) has
        # nothing to settle after its first pass but change flags
        touched["structure"] = any(
            getattr(w2, k) is not getattr(w, k) for k in ("alive", "new", "removing", "parent", "generation", "pinned")
        ) or any(w2.components[k].present is not c.present for k, c in w.components.items())
        return out

    outputs_shape = jax.eval_shape(probe, world, info)
    # inside the loop, a conditional per pass only where a system can request a reset or a stop: a
    # conditional over the world copies every array it returns each pass (10,000 entities: ~3x the
    # pass itself); requests made before the run are handled once, around the loop
    can_reset, can_stop = touched["reset"], touched["stop"]
    # (ECS stepping speed, issue #38 item 9: per-entity bookkeeping arrays are written only when a
    # step can change them; 10,000 moving entities: 19.4 -> 10.5 ms for 1,000 steps)
    lean = not touched["structure"] and not can_reset and not touched["recreate"]
    if num_steps == 0:
        empty = jax.tree_util.tree_map(lambda sd: jnp.zeros((0,) + sd.shape, sd.dtype), outputs_shape)
        return given, info, empty

    def zeros(n: int | None = None) -> Any:
        lead = () if n is None else (n,)
        return jax.tree_util.tree_map(lambda sd: jnp.zeros(lead + sd.shape, sd.dtype), outputs_shape)

    def one_pass(w: World, i: UpdateInfo, r: RunnerState, p: Any, resets: bool, lean_pass: bool = lean) -> Any:
        forced = p if schedule is not None else None
        w2, i2, r2, out = _runner_pass(
            w, i, r, systems, step_ns, initial, forced, outputs_shape, resets, touched["recreate"], lean_pass
        )
        return (w2, i2, r2), out

    def body(carry: Any, p: Any) -> tuple[Any, Any]:
        w, i, r = carry
        if not can_stop:
            return one_pass(w, i, r, p, can_reset)
        return jax.lax.cond(w.control.stopped, lambda: (carry, zeros()), lambda: one_pass(w, i, r, p, can_reset))

    xs = schedule if schedule is not None else jnp.zeros((num_steps,), bool)

    def run_all(carry: Any) -> Any:
        # the first pass on its own: it may be the reset pass asked for before the run (that pass alone
        # decides), or settle what was asked on the world before the run (removals, new entities) for
        # the lean passes after it
        if (entry_reset and not can_reset) or (lean and not carry[0]._settled()):
            w0, i0, r0 = carry
            carry, first = one_pass(w0, i0, r0, xs[0], can_reset or entry_reset, False)
            carry, rest = jax.lax.scan(body, carry, xs[1:])
            return carry, jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), first, rest)
        return jax.lax.scan(body, carry, xs)

    # (recreations asked for on the world before the run; a traced world is asked at run time: copying
    # subtrees costs several passes over the slots, ~20 ms for 1,000,000 entities, not to be paid when
    # none was asked for)
    asked = jnp.any(world.recreating)

    def general(carry: Any) -> Any:
        w, i, r = carry
        if isinstance(asked, jax.core.Tracer):
            w = jax.lax.cond(asked, World.process_recreate, lambda w: w, w)
        elif bool(asked):
            w = w.process_recreate()
        carry = (w, i, r)
        if entry_stop and not can_stop:
            # stopped before the run (a stop requested on the world): no pass runs
            return jax.lax.cond(w.control.stopped, lambda c: (c, zeros(num_steps)), run_all, carry)
        return run_all(carry)

    carry0 = (world, info, rs)
    final: Any
    pending = jnp.asarray(asked) | jnp.asarray(rs.rewind, bool) | jnp.asarray(world.control.stopped, bool)
    if lean:
        pending = pending | ~world._settled_array()
    if isinstance(pending, jax.core.Tracer):
        # a world traced under jit: whether anything was asked of it before the run is known only at run
        # time. One conditional on that (a few reductions over the slots) around the whole run: each
        # conditional over the world copies every array of it (~5 ms at 1,000,000 entities), so the run
        # with nothing pending is the plain scan of passes
        # (under vmap over worlds: the whole batch takes the general run if any member needs it, so the
        # conditional stays one and does not become a select evaluating both runs)
        final = jax.lax.cond(_any_member(pending), general, lambda c: jax.lax.scan(body, c, xs), carry0)
    else:
        final = general(carry0)
    (world, info_end, rs_end), outputs = final
    # a reset requested in the last pass is the next run's first pass
    control = dataclasses.replace(world.control, reset=jnp.asarray(rs_end.rewind, bool))
    return dataclasses.replace(world, control=control), info_end, outputs


@jax.custom_batching.custom_vmap
def _any_member(pred: jax.Array) -> jax.Array:
    """``pred`` (a bool scalar); under ``vmap``, unbatched: whether it holds for any member."""
    return pred


@_any_member.def_vmap
def _any_member_rule(axis_size: int, in_batched: Any, pred: jax.Array) -> tuple[jax.Array, bool]:
    return _any_member(jnp.any(pred, axis=0) if in_batched[0] else pred), False


def configure(world: World, systems: Sequence[EcsSystem]) -> World:
    """Check each system's owner entity exists, then call every system's ``configure`` in priority
    order (gz-sim: after loading, before running)."""
    for s in systems:
        owner = s.get_owner()
        if not (isinstance(owner, int) and owner == NULL_ENTITY):
            ok = world.exists(owner)
            if not isinstance(ok, jax.core.Tracer) and not bool(ok):
                raise JaxsysError(
                    f"configure: {type(s).__name__}'s owner entity {int(owner)} does not exist in the world."
                )
    for s in _ordered(systems, "configure"):
        world = s.configure(world)
    return world


def _concrete_true(x: Any) -> bool:
    """True if ``x`` is known (not traced) and true."""
    if isinstance(x, jax.core.Tracer):
        return True  # (unknown: assume it may be)
    return bool(np.asarray(x))


def system_order(systems: Sequence[EcsSystem]) -> dict[str, list[str]]:
    """Which systems run in each phase, in the order they run (gz-sim's SystemManager views
    ``SystemsPreUpdate`` / ``SystemsUpdate`` / ``SystemsPostUpdate``, ``SystemsReset``,
    ``SystemsConfigure``): phase -> names (the class name, or a system's ``name`` attribute)."""

    def name(s: EcsSystem) -> str:
        return str(getattr(s, "name", type(s).__name__))

    out = {}
    for phase in ("configure", "pre_update", "update", "reset"):
        out[phase] = [name(s) for s in _ordered(systems, phase)]
    out["post_update"] = [name(s) for s in systems if _implements(s, "post_update")]
    return out


class SystemManager:
    """gz-sim's ``SystemManager``: systems are added as *pending* and become *active* at an
    activation step (``activate_pending_systems``; `run` does it at its start, as gz-sim's runner
    does at the start of each step), so a system added while others run joins them at the next
    step, never in the middle of one. Pass it to `run` instead of a list.

    ``add_system(system, world)`` configures the system against ``world`` (checking its owner entity)
    and returns the world; without a world no configuration happens (gz-sim: no ECM). The views
    (``systems_configure()``, ``systems_pre_update()``, ``systems_update()``, ``systems_post_update()``,
    ``systems_reset()``) list the active systems of each phase in the order they run."""

    def __init__(self, systems: Sequence[EcsSystem] = ()) -> None:
        self.active: list[EcsSystem] = []
        self.pending: list[EcsSystem] = []
        for s in systems:
            self.add_system(s)

    def add_system(self, system: EcsSystem, world: World | None = None) -> World | None:
        """Add ``system`` as pending (gz-sim ``AddSystem``); configured against ``world`` if given
        (the configured world is returned)."""
        if not isinstance(system, EcsSystem):
            raise JaxsysError(f"SystemManager.add_system: expected an ecs.EcsSystem; got {type(system).__name__}.")
        self.pending.append(system)
        return configure(world, [system]) if world is not None else None

    def activate_pending_systems(self) -> int:
        """Make the pending systems active (gz-sim ``ActivatePendingSystems``); returns how many."""
        n = len(self.pending)
        self.active.extend(self.pending)
        self.pending = []
        return n

    def active_count(self) -> int:
        """Active systems (gz-sim ``ActiveCount``)."""
        return len(self.active)

    def pending_count(self) -> int:
        """Systems waiting for the next activation step (gz-sim ``PendingCount``)."""
        return len(self.pending)

    def total_count(self) -> int:
        """Active and pending systems (gz-sim ``TotalCount``)."""
        return len(self.active) + len(self.pending)

    def total_by_entity(self, entity: Any) -> list[EcsSystem]:
        """The active and pending systems owned by ``entity`` (gz-sim ``TotalByEntity``)."""
        return [s for s in self.active + self.pending if _same_entity(s.get_owner(), entity)]

    def process_removed_entities(self, world: World) -> int:
        """Drop the systems whose owner entity no longer exists in ``world`` (gz-sim
        ``ProcessRemovedEntities``; `run` already skips them); returns how many were dropped."""
        alive = [_owner_exists(s, world) for s in self.active]
        keep = [s for s, a in zip(self.active, alive) if a is None or bool(a)]
        dropped = len(self.active) - len(keep)
        self.active = keep
        return dropped

    def _phase(self, phase: str) -> list[EcsSystem]:
        if phase == "post_update":
            return [s for s in self.active if _implements(s, phase)]
        return _ordered(self.active, phase)

    def systems_configure(self) -> list[EcsSystem]:
        """Active systems with ``configure`` (gz-sim ``SystemsConfigure``)."""
        return self._phase("configure")

    def systems_pre_update(self) -> list[EcsSystem]:
        """Active systems with ``pre_update``, in run order (gz-sim ``SystemsPreUpdate``)."""
        return self._phase("pre_update")

    def systems_update(self) -> list[EcsSystem]:
        """Active systems with ``update``, in run order (gz-sim ``SystemsUpdate``)."""
        return self._phase("update")

    def systems_post_update(self) -> list[EcsSystem]:
        """Active systems with ``post_update`` (gz-sim ``SystemsPostUpdate``)."""
        return self._phase("post_update")

    def systems_reset(self) -> list[EcsSystem]:
        """Active systems with ``reset`` (gz-sim ``SystemsReset``)."""
        return self._phase("reset")


def _same_entity(a: Any, b: Any) -> bool:
    return bool(np.asarray(a) == np.asarray(b))


def reset(initial_world: World, systems: Sequence[EcsSystem]) -> tuple[World, UpdateInfo]:
    """Back to the initial world and a fresh UpdateInfo; systems with ``reset`` are called
    (gz-sim's rewind)."""
    info = UpdateInfo.start(True)
    world = initial_world
    for s in _ordered(systems, "reset"):
        world = s.reset(info, world)
    return world, info


class _Hooks(EcsSystem):
    """An EcsSystem made of hook functions (see `TestFixture`)."""

    hooks: dict[str, Any] = eqx.field(static=True)
    name: str = eqx.field(static=True)
    prio: int = eqx.field(static=True)

    @property
    def priority(self) -> int:  # type: ignore[override]
        return self.prio

    def pre_update(self, info: UpdateInfo, world: World) -> World:
        return self.hooks["pre_update"](info, world)

    def update(self, info: UpdateInfo, world: World) -> World:
        return self.hooks["update"](info, world)

    def post_update(self, info: UpdateInfo, view: WorldView) -> Any:
        return self.hooks["post_update"](info, view)

    def reset(self, info: UpdateInfo, world: World) -> World:
        return self.hooks["reset"](info, world)


def _hook_system(hooks: dict[str, Any], priority: int) -> EcsSystem:
    """A system implementing exactly the phases in ``hooks``."""
    methods = {phase: getattr(_Hooks, phase) for phase in hooks}
    cls = type("HookSystem", (_Hooks,), {k: v for k, v in methods.items()})
    # phases without a hook fall back to EcsSystem's (so the runner skips them)
    for phase in ("pre_update", "update", "post_update", "reset"):
        if phase not in hooks:
            setattr(cls, phase, getattr(EcsSystem, phase))
    return cls(hooks=dict(hooks), name="fixture", prio=priority)


class TestFixture:
    """gz-sim's ``TestFixture`` for users' tests: a world, its systems, and hook functions per phase
    (``on_configure(f)``, ``on_pre_update(f)``, ``on_update(f)``, ``on_post_update(f)``,
    ``on_reset(f)``; pure functions with the phase's signature), then ``finalize()``, then ``run(N)``;
    inspect ``fixture.world``, ``fixture.info`` and ``fixture.outputs`` (the hook's post_update
    outputs last). The hooks run as one system of ``priority`` (default: ``DEFAULT_PRIORITY``).

    As gz-sim's: the world's systems are configured when the fixture is made; the hooks take part
    only once ``finalize()`` was called (a ``run`` before it steps the world without them:
    TestFixture_TEST NoFinalize), ``on_configure`` runs once, at the first ``finalize()`` (calling it
    again changes nothing: MultiFinalize), and a hook set after that replaces the old one from the
    next ``run`` (ChangeCallback). Each ``run`` continues from the last one."""

    __test__ = False  # (not a pytest test class)

    def __init__(self, world: World, systems: Sequence[EcsSystem] = (), priority: int = DEFAULT_PRIORITY) -> None:
        self.world = configure(world, systems)
        self.systems = list(systems)
        self.priority = priority
        self.hooks: dict[str, Any] = {}
        self.finalized = False
        self.info: UpdateInfo | None = None
        self.outputs: tuple[Any, ...] = ()

    def _on(self, phase: str, fn: Any) -> TestFixture:
        if not callable(fn):
            raise JaxsysError(f"TestFixture.on_{phase}: expected a function; got {fn!r}.")
        self.hooks[phase] = fn
        return self

    def on_configure(self, fn: Any) -> TestFixture:
        """``fn(world) -> world``, called once by the first `finalize` (gz: ``OnConfigure``)."""
        return self._on("configure", fn)

    def on_pre_update(self, fn: Any) -> TestFixture:
        """``fn(info, world) -> world`` in PreUpdate (gz: ``OnPreUpdate``)."""
        return self._on("pre_update", fn)

    def on_update(self, fn: Any) -> TestFixture:
        """``fn(info, world) -> world`` in Update (gz: ``OnUpdate``)."""
        return self._on("update", fn)

    def on_post_update(self, fn: Any) -> TestFixture:
        """``fn(info, view) -> outputs`` in PostUpdate (gz: ``OnPostUpdate``); its outputs, one per
        step, are ``fixture.outputs[-1]``."""
        return self._on("post_update", fn)

    def on_reset(self, fn: Any) -> TestFixture:
        """``fn(info, world) -> world`` on a reset."""
        return self._on("reset", fn)

    def finalize(self) -> TestFixture:
        """Add the hooks to the run and call the ``on_configure`` hook (gz: ``Finalize``); only the
        first call configures."""
        if not self.finalized:
            self.finalized = True
            if "configure" in self.hooks:
                world = self.hooks["configure"](self.world)
                if not isinstance(world, World):
                    raise JaxsysError(
                        f"TestFixture.on_configure: the hook must return the World; got {type(world).__name__}."
                    )
                self.world = world
        return self

    def run(self, num_steps: int, **kwargs: Any) -> TestFixture:
        """Run ``num_steps`` steps (keyword arguments as `run`); returns the fixture. Without
        `finalize`, the hooks do not take part (gz-sim)."""
        systems = list(self.systems)
        phases = {k: v for k, v in self.hooks.items() if k != "configure"}
        if self.finalized and phases:
            systems.append(_hook_system(phases, self.priority))
        self.world, self.info, self.outputs = run(self.world, systems, num_steps, info=self.info, **kwargs)
        return self
