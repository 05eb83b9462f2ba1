"""ECS systems, UpdateInfo and the phase runner (gz-sim's System, UpdateInfo, SimulationRunner).

A system subclasses :class:`EcsSystem` and implements the phases it needs:

* ``configure(world) -> world`` once before running (gz-sim ``Configure``);
* ``pre_update(info, world) -> world`` (read-write: controls, spawning);
* ``update(info, world) -> world`` (read-write: physics);
* ``post_update(info, view) -> outputs`` (read-only: ``view`` is a :class:`WorldView`; the outputs are
  collected per step);
* ``reset(info, world) -> world``.

Each step: UpdateInfo is advanced first (``sim_time`` is the time reached after PreUpdate and
Update: 0 on a paused start, ``dt`` on an unpaused one; paused steps have dt = 0 and change neither
``sim_time`` nor ``iterations``), then all PreUpdates in priority order (smaller first, ties in the
order added), all Updates likewise, all PostUpdates, then the world's end of step. A system only
changes components of entities that have all its ``requires`` components (and entities it creates):
the runner discards other changes. :func:`run` is one ``lax.scan``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from ..framework.errors import JaxsysError
from .world import Column, World, WorldView


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
    def start(paused: bool = True) -> UpdateInfo:
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

    def configure(self, world: World) -> World:
        """Called once by :func:`configure` before running."""
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
        """Called by :func:`reset`."""
        return world


def _implements(system: EcsSystem, phase: str) -> bool:
    return getattr(type(system), phase) is not getattr(EcsSystem, phase)


def _ordered(systems: Sequence[EcsSystem], phase: str) -> list[EcsSystem]:
    chosen = [(s.priority, i, s) for i, s in enumerate(systems) if _implements(s, phase)]
    return [s for _, _, s in sorted(chosen, key=lambda t: (t[0], t[1]))]


def _guarded(system: EcsSystem, before: World, after: World) -> World:
    """Keep only changes to entities having the system's required components (or created by it)."""
    if not isinstance(after, World):
        raise JaxsysError(
            f"{type(system).__name__} must return the World from its pre_update/update; got {type(after).__name__}."
        )
    required = system.required_components()
    if not required:
        return after
    allowed = before.each(required) | (after.alive & ~before.alive)
    comps = {}
    for name, col in after.components.items():
        old = before.components[name]
        m = allowed.reshape((-1,) + (1,) * (col.data.ndim - 1))
        comps[name] = Column(jnp.where(m, col.data, old.data), jnp.where(allowed, col.present, old.present))
    return World(after.alive, after.new, after.removing, after.parent, comps)


def step(
    world: World, info: UpdateInfo, systems: Sequence[EcsSystem], paused: Any, step_ns: int
) -> tuple[World, UpdateInfo, tuple[Any, ...]]:
    """One simulation step: advance info, PreUpdates, Updates, PostUpdates, end of step."""
    info = info.advanced(paused, step_ns)
    for s in _ordered(systems, "pre_update"):
        world = _guarded(s, world, s.pre_update(info, world))
    for s in _ordered(systems, "update"):
        world = _guarded(s, world, s.update(info, world))
    view = WorldView(world)
    outputs = []
    for s in systems:  # PostUpdate order is irrelevant (gz-sim runs them in parallel)
        if _implements(s, "post_update"):
            out = s.post_update(info, view)
            if any(
                isinstance(x, (World, WorldView))
                for x in jax.tree_util.tree_leaves(out, is_leaf=lambda x: isinstance(x, (World, WorldView)))
            ):
                raise JaxsysError(
                    f"{type(s).__name__}.post_update returned a World: PostUpdate is read-only; change the world in "
                    f"pre_update or update."
                )
            outputs.append(out)
    return world.end_of_step(), info, tuple(outputs)


def configure(world: World, systems: Sequence[EcsSystem]) -> World:
    """Call every system's ``configure`` in priority order (gz-sim: after loading, before running)."""
    for s in _ordered(systems, "configure"):
        world = s.configure(world)
    return world


def run(
    world: World,
    systems: Sequence[EcsSystem],
    num_steps: int,
    step_size: float = 1e-3,
    paused: Any = False,
    info: UpdateInfo | None = None,
) -> tuple[World, UpdateInfo, tuple[Any, ...]]:
    """Run ``num_steps`` steps as one ``lax.scan``.

    **Arguments:**
    - `paused`: a bool, or a bool array of length ``num_steps`` (pausing may change per step).
    - `step_size`: s; kept as integer nanoseconds.
    - `info`: continue from this UpdateInfo (default: a fresh start).

    Returns (final world, final info, outputs): one entry per system with ``post_update``, each with a
    leading axis of length ``num_steps``.
    """
    step_ns = int(round(step_size * _NS))
    if not 0 < step_ns < 2**31:
        raise JaxsysError(f"run: step_size must be in (0, 2.1) s; got {step_size}.")
    paused = jnp.broadcast_to(jnp.asarray(paused, bool), (num_steps,))
    info = (
        info
        if info is not None
        else UpdateInfo.start(bool(paused[0]) if not isinstance(paused, jax.core.Tracer) else True)
    )

    def body(carry: tuple[World, UpdateInfo], p: Any) -> tuple[tuple[World, UpdateInfo], Any]:
        w, i = carry
        w, i, out = step(w, i, systems, p, step_ns)
        return (w, i), out

    (world, info), outputs = jax.lax.scan(body, (world, info), paused)
    return world, info, outputs


def reset(initial_world: World, systems: Sequence[EcsSystem]) -> tuple[World, UpdateInfo]:
    """Back to the initial world and a fresh UpdateInfo; systems with ``reset`` are called
    (gz-sim's rewind)."""
    info = UpdateInfo.start(True)
    world = initial_world
    for s in _ordered(systems, "reset"):
        world = s.reset(info, world)
    return world, info
