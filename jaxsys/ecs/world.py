"""The World: entities and components as struct-of-arrays pytrees (gz-sim's EntityComponentManager).

An entity lives in a slot of ``[0, capacity)``. Each component type is a `Column`: a data array
with one row per slot and a presence mask. Everything is arrays of static shape, so a World passes
through ``jit``, batches under ``vmap`` and differentiates with respect to float component data.

**Entity handles are generational.** gz-sim never reuses an entity id; a World reuses slots, so the
handle of an entity is ``generation * capacity + slot``, where the slot's generation grows each time an
entity is removed from it. A handle kept after its entity was removed (stale), ``NULL_ENTITY``, or a
number that was never a handle does not name any entity, whatever now lives in that slot:

* reads (`World.component`) raise an error naming the operation (eagerly, or inside ``jit`` with
  ``equinox.error_if``); `World.try_component` returns ``(value, found)`` instead (zeros when not
  found, never NaN); `World.has_component` and `World.exists` say False;
* writes and removal requests (`World.create_component`, `World.remove_component`,
  `World.request_remove_entity`, `World.set_parent`) change nothing: called eagerly they
  raise a [`JaxsysError`][jaxsys.JaxsysError]; inside ``jit`` they are no-ops counted in
  ``world.invalid_operations``.

The first generation's handles equal the slots (a fresh world's entity 3 is slot 3).

gz-sim semantics kept: a created entity is visible at once and counts as *new* until the end of the
step; removal is a request carried out at the end of the step (recursive over children by default);
``each`` includes entities marked for removal; running out of capacity is an error (``error_if``).
Change tracking (gz-sim's ``ComponentState``): every write of a component marks it changed for that
entity until the end of the step, as a one-time change (``OneTimeChange``, the default) or, when the
writer says so, a periodic one (``PeriodicChange``: e.g. a pose that changes every step);
`World.each_changed` selects either or both.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..framework.errors import JaxsysError


Array = jax.Array
F = TypeVar("F", bound=Callable[..., Any])

_SPAWNER: contextvars.ContextVar[str | None] = contextvars.ContextVar("jaxsys_ecs_spawner", default=None)


@contextlib.contextmanager
def creating_as(label: str) -> Iterator[None]:
    """While tracing a system's phase, name it (``"Spawner.pre_update"``) in the errors of entity
    creation (a full world), so the message says which system spawned."""
    token = _SPAWNER.set(label)
    try:
        yield
    finally:
        _SPAWNER.reset(token)


# While the runner traces one system's phase: the rows `World.apply` wrote, by the identity of the
# arrays it returned -> (the array, the array it wrote into, the component names its mask required,
# the `alive` and `present` arrays that mask was computed from). The runner's guard of the system's
# writes (`ecs.systems`) skips its select on a column whose only write is recorded here with a mask
# inside the guard's own.
_APPLY_WRITES: contextvars.ContextVar[dict[int, tuple[Any, ...]] | None] = contextvars.ContextVar(
    "jaxsys_ecs_apply_writes", default=None
)


@contextlib.contextmanager
def recording_writes() -> Iterator[dict[int, tuple[Any, ...]]]:
    """Record the writes of `World.apply` made inside the block (see ``_APPLY_WRITES``)."""
    writes: dict[int, tuple[Any, ...]] = {}
    token = _APPLY_WRITES.set(writes)
    try:
        yield writes
    finally:
        _APPLY_WRITES.reset(token)


NULL_ENTITY = -1


def _concrete(x: Any) -> Any:
    """The value of ``x`` as NumPy if it is known here (not traced), else None."""
    if isinstance(x, jax.core.Tracer):
        return None
    try:
        return np.asarray(x)
    except Exception:  # noqa: BLE001
        return None


def _traced(*trees: Any) -> bool:
    return any(isinstance(x, jax.core.Tracer) for t in trees for x in jax.tree_util.tree_leaves(t))


def _fast_when_eager(
    arrays: tuple[str, ...], entities: tuple[str, ...] = (), precheck: Callable[..., None] | None = None
) -> Callable[[F], F]:
    """An eager call of the decorated World method (nothing traced) runs as one compiled program,
    cached per world structure and static arguments (each eager jnp operation costs ~10-30 us of
    dispatch: an entity built one call at a time took ~6 ms; compiled, ~0.1 ms). The handles named by
    ``entities`` are checked here first, in NumPy, with the eager errors the method raises (and
    ``precheck(**arguments)`` run, for other eager errors); the
    arguments named by ``arrays`` become arrays (a Python number would be a static argument and
    compile once per value). A traced call runs the method as written."""

    def deco(fn: F) -> F:
        sig = inspect.signature(fn)
        static = [n for n in list(sig.parameters)[1:] if n not in arrays]
        # (jax.jit's dispatch is ~10x cheaper than a filtering jit's for a world of many leaves)
        compiled = jax.jit(fn, static_argnames=static)

        @functools.wraps(fn)
        def wrapper(self: World, *args: Any, **kwargs: Any) -> Any:
            if _traced(self, args, kwargs):
                return fn(self, *args, **kwargs)
            bound = sig.bind(self, *args, **kwargs)
            for name in entities:
                if name in bound.arguments:
                    self._check_eager(bound.arguments[name], f"{fn.__name__}({name}, ...)")
            if precheck is not None:
                precheck(**bound.arguments)
            for name in arrays:
                if name in bound.arguments:
                    bound.arguments[name] = jnp.asarray(bound.arguments[name])
            return compiled(*bound.args, **bound.kwargs)

        return wrapper  # type: ignore[return-value]

    return deco


class Column(eqx.Module):
    """One component type: ``data`` (capacity, *shape), ``present`` (capacity,) and ``changed``
    (int8, capacity): 0 unchanged, 1 periodic change, 2 one-time change this step (gz-sim's
    ``ComponentState``; the stronger of the step's writes), -1 removed this step (gz-sim: state
    ``NoChange``, listed among the removed components), cleared at the end of the step."""

    data: Array
    present: Array
    changed: Array


_INT_OF_WIDTH = {1: jnp.int8, 2: jnp.int16, 4: jnp.int32, 8: jnp.int64}


@jax.custom_jvp
def _select_rows(mask: Array, new: Array, old: Array) -> Array:
    """``new`` in the rows where ``mask`` (capacity,), else ``old``: ``jnp.where`` with the mask broadcast
    over each row, computed as bitwise operations on the values' bits. XLA's CPU backend vectorizes a
    ``select`` on a row mask poorly: a pass of ``pos += dt vel`` over 10,000 two-vector rows takes 2.2x
    as long through ``jnp.where`` as without the mask, and less than without it through the bits
    (issue #38 item 9). The derivative is ``jnp.where``'s."""
    width = jnp.dtype(new.dtype).itemsize
    if new.dtype == jnp.bool_ or jnp.issubdtype(new.dtype, jnp.complexfloating) or width not in _INT_OF_WIDTH:
        return jnp.where(mask.reshape((-1,) + (1,) * (new.ndim - 1)), new, old)
    ints = _INT_OF_WIDTH[width]
    bits = jnp.broadcast_to(jnp.where(mask, ints(-1), ints(0)).reshape((-1,) + (1,) * (new.ndim - 1)), new.shape)
    a = jax.lax.bitcast_convert_type(new, ints) if new.dtype != ints else new
    b = jax.lax.bitcast_convert_type(old, ints) if old.dtype != ints else old
    out = b ^ ((a ^ b) & bits)  # (a where bits are set, else b: one mask array read, not two)
    return jax.lax.bitcast_convert_type(out, new.dtype) if new.dtype != ints else out


@_select_rows.defjvp
def _select_rows_jvp(primals: Any, tangents: Any) -> tuple[Array, Array]:
    mask, new, old = primals
    _, t_new, t_old = tangents
    m = mask.reshape((-1,) + (1,) * (new.ndim - 1))
    return _select_rows(mask, new, old), jnp.where(m, t_new, t_old)


def _mark(changed: Array, where: Array, periodic: bool) -> Array:
    """Change flags raised to periodic (1) or one-time (2) where ``where`` (the stronger one wins)."""
    level = jnp.int8(1 if periodic else 2)
    return jnp.where(where, jnp.maximum(changed, level), changed).astype(jnp.int8)


class Control(eqx.Module):
    """World-control requests systems make during a step, applied by the runner at the step's end
    (gz-sim's WorldControl / ``events::Pause`` / ``events::Stop``), whether the run stopped, and the
    runner's own state after its last pass, so that the next ``ecs.run`` of this world goes on from
    it as gz-sim's SimulationRunner does (requests made on the world between runs are applied before
    the next run's first pass).

    **Fields:** `pause` (int32: -1 no request, 0 play, 1 pause), `multi_step` (int32: steps to take
    while paused), `reset` (bool: rewind to the run's initial world), `stop` (bool: end the run),
    `stopped` (bool: a stop was carried out; later steps of the run do nothing), `runner_paused`
    (int32: -1 no run yet, 0 playing, 1 paused), `runner_pending` (int32: steps left of a
    multi-step), `runner_run_to` (int32 [sec, nsec] the runner pauses at; [-1, 0] none).
    """

    pause: Array
    multi_step: Array
    reset: Array
    stop: Array
    stopped: Array
    runner_paused: Array = eqx.field(default_factory=lambda: jnp.full((), -1, jnp.int32))
    runner_pending: Array = eqx.field(default_factory=lambda: jnp.zeros((), jnp.int32))
    runner_run_to: Array = eqx.field(default_factory=lambda: jnp.array([-1, 0], jnp.int32))

    @staticmethod
    def none() -> Control:
        """No requests (and no runner state yet)."""
        f = jnp.zeros((), bool)
        return Control(jnp.full((), -1, jnp.int32), jnp.zeros((), jnp.int32), f, f, f)

    def requests_cleared(self) -> Control:
        """This control with the requests of the step cleared (the stop carried out and the runner
        state kept)."""
        f = jnp.zeros((), bool)
        return dataclasses.replace(
            self, pause=jnp.full((), -1, jnp.int32), multi_step=jnp.zeros((), jnp.int32), reset=f, stop=f
        )


class World(eqx.Module):
    """Entities (slots) and their components.

    **Fields:** `alive`, `new`, `removing` (bool, capacity), `parent` (int32 handles, capacity;
    ``NULL_ENTITY`` none), `generation` (int32, capacity: how many entities each slot has held and
    lost), `components` (name -> `Column`; the names are static structure),
    `invalid_operations` (int32: writes or removals with a handle that names no entity, made inside
    ``jit``, which did nothing), `control` (`Control`: world-control requests of this step),
    `pinned` (bool, capacity: entities that removal requests leave alone, gz-sim ``PinEntity``),
    `recreating` (bool, capacity: entities to re-create at the end of the step, gz-sim ``Recreate``).
    """

    alive: Array
    new: Array
    removing: Array
    parent: Array
    components: dict[str, Column]
    generation: Array
    invalid_operations: Array
    control: Control
    pinned: Array
    recreating: Array

    @staticmethod
    def empty(capacity: int, components: Mapping[str, Any]) -> World:
        """An empty world with room for ``capacity`` entities and these component types.

        ``components``: name -> an example value (its shape and dtype define the column).
        """
        if not isinstance(capacity, (int, np.integer)) or capacity <= 0:
            raise JaxsysError(f"World.empty: capacity must be a positive int; got {capacity!r}.")
        cols = {}
        for name, example in components.items():
            ex = jnp.asarray(example)
            z = jnp.zeros((capacity,), bool)
            cols[name] = Column(jnp.zeros((capacity,) + ex.shape, ex.dtype), z, jnp.zeros((capacity,), jnp.int8))
        z = jnp.zeros((capacity,), bool)
        return World(
            z,
            z,
            z,
            jnp.full((capacity,), NULL_ENTITY, jnp.int32),
            cols,
            jnp.zeros((capacity,), jnp.int32),
            jnp.zeros((), jnp.int32),
            Control.none(),
            z,
            z,
        )

    @property
    def capacity(self) -> int:
        """The number of entity slots."""
        return int(self.alive.shape[0])

    def _column(self, name: str) -> Column:
        if name not in self.components:
            raise JaxsysError(
                f"World has no component type {name!r}; its component types are {sorted(self.components)}."
            )
        return self.components[name]

    # ----- handles ----------------------------------------------------------------------------
    def handles(self) -> Array:
        """The handle of the entity in each slot (int32, capacity); meaningful where ``alive``."""
        return self.generation * self.capacity + jnp.arange(self.capacity, dtype=jnp.int32)

    def slot_of(self, entity: Any) -> tuple[Array, Array]:
        """``(slot, exists)`` of a handle: the slot it names, and whether that slot holds this very
        entity (alive, same generation; entities marked for removal still exist until the step ends)."""
        h = jnp.asarray(entity)
        if not jnp.issubdtype(h.dtype, jnp.integer) or h.shape != ():
            raise JaxsysError(
                f"World: an entity handle is an integer scalar (from create_entity); got {h.dtype}{h.shape}."
            )
        h = h.astype(jnp.int32)
        cap = self.capacity
        slot = jnp.where(h >= 0, h % cap, 0).astype(jnp.int32)
        exists = (h >= 0) & self.alive[slot] & (self.generation[slot] == h // cap)
        return slot, exists

    def exists(self, entity: Any) -> Array:
        """Whether ``entity`` names an existing entity (False for stale handles and NULL_ENTITY)."""
        return self.slot_of(entity)[1]

    def _check(self, entity: Any, exists: Array, what: str) -> None:
        """Raise now if ``exists`` is known to be False (an eager call)."""
        known = _concrete(exists)
        if known is not None and not bool(known):
            e = _concrete(entity)
            raise JaxsysError(
                f"World.{what}: entity {int(e) if e is not None else '?'} does not exist (never created, already "
                f"removed — a stale handle whose slot may now hold another entity — or NULL_ENTITY). Handles from "
                f"create_entity stay valid until the entity's removal is carried out at the end of a step."
            )

    def _exists_np(self, handles: Any) -> np.ndarray:
        """`exists` for concrete handles (one or an array), in NumPy (no device operation)."""
        h = np.asarray(handles).reshape(-1).astype(np.int64)
        cap = self.capacity
        slot = np.where(h >= 0, h % cap, 0)
        return (h >= 0) & np.asarray(self.alive)[slot] & (np.asarray(self.generation)[slot] == h // cap)

    def _check_eager(self, entity: Any, what: str) -> None:
        """`_check` for a concrete handle, in NumPy."""
        if not self._exists_np(entity)[0]:
            self._check(int(np.asarray(entity)), jnp.asarray(False), what)

    def _invalid(self, exists: Array) -> Array:
        return self.invalid_operations + (~exists).astype(jnp.int32)

    # ----- entities ---------------------------------------------------------------------------
    def _parent_precheck(self, parent: Any = NULL_ENTITY, **_: Any) -> None:
        """Eager: raise if a parent handle (one, or an array of them) names no entity (NumPy only)."""
        h = np.asarray(parent).reshape(-1).astype(np.int64)
        ok = (h == NULL_ENTITY) | self._exists_np(h)
        if not ok.all():
            raise JaxsysError(
                f"World.create_entity: parent {int(h[~ok][0])} does not exist (a stale or invalid handle); pass a "
                f"handle from create_entity, or NULL_ENTITY for none."
            )

    @_fast_when_eager(arrays=("parent",), precheck=lambda self, parent=NULL_ENTITY, **_: self._parent_precheck(parent))
    def create_entity(self, parent: Any = NULL_ENTITY) -> tuple[World, Array]:
        """A new entity in the first free slot, child of ``parent`` (a handle, or NULL_ENTITY): visible
        at once, *new* until the end of the step (gz-sim ``CreateEntity``). Returns (world, handle).
        Errors (eagerly, or inside ``jit`` via ``error_if``): the world is full; ``parent`` names no
        entity."""
        parent = jnp.asarray(parent, jnp.int32)
        p_ok = (parent == NULL_ENTITY) | self.exists(parent)
        known = _concrete(p_ok)
        if known is not None and not bool(known):
            raise JaxsysError(
                f"World.create_entity: parent {int(parent)} does not exist (a stale or invalid handle); pass a "
                f"handle from create_entity, or NULL_ENTITY for none."
            )
        world, handles = self._create_entities(1, parent, {})
        return world, handles[0]

    def create_entities(
        self, count: int, parent: Any = NULL_ENTITY, components: Mapping[str, Any] | None = None
    ) -> tuple[World, Array]:
        """``count`` new entities (a static count) in the first free slots, in one operation (also
        inside ``jit``): what ``count`` calls of `create_entity` give, slot for slot. ``parent``: one
        handle for all, or one per entity (shape (count,)); ``components``: name -> values of shape
        (count, *component shape), given to the new entities (one-time changes, as
        `create_component`). Returns (world, handles (count,)). Errors as `create_entity`: too few free
        slots, a parent that names no entity."""
        if not isinstance(count, (int, np.integer)) or isinstance(count, bool) or count < 0:
            raise JaxsysError(f"World.create_entities: count must be an int >= 0 (static); got {count!r}.")
        values = {}
        for name, v in (components or {}).items():
            col = self._column(name)
            v = jnp.asarray(v)
            want = (count,) + tuple(col.data.shape[1:])
            if tuple(v.shape) != want:
                raise JaxsysError(
                    f"World.create_entities: component {name!r} values have shape {tuple(v.shape)}; expected {want} "
                    f"(count, then the component's shape)."
                )
            values[name] = v.astype(col.data.dtype)
        parent = jnp.asarray(parent, jnp.int32)
        if parent.shape not in ((), (count,)):
            raise JaxsysError(
                f"World.create_entities: parent must be one handle or one per entity (shape ({count},)); got shape "
                f"{parent.shape}."
            )
        if not _traced(self, parent, values):
            self._parent_precheck(parent)
            return _create_entities_compiled(self, count, parent, values)
        return self._create_entities(count, parent, values)

    def _create_entities(self, count: int, parent: Array, values: dict[str, Array]) -> tuple[World, Array]:
        cap = self.capacity
        free = ~self.alive
        spawner = _SPAWNER.get()
        by = f"; the entity was being created by {spawner}" if spawner else ""
        enough = jnp.sum(free) >= count
        if count <= 16:
            # the first free slots, one reduction each: a cumulative sum (and nonzero's) over the
            # capacity is ~100x slower on a CPU (10,000 slots: ~200 us a call)
            taken, picked = free, []
            for _ in range(count):
                slot = jnp.argmax(taken).astype(jnp.int32)
                picked.append(slot)
                taken = taken.at[slot].set(False)
            slots = jnp.stack(picked) if picked else jnp.zeros((0,), jnp.int32)
        else:
            chosen = free & (jnp.cumsum(free) <= count)
            slots = jnp.nonzero(chosen, size=count, fill_value=0)[0].astype(jnp.int32)
        full = (
            f"all {cap} entity slots are in use"
            if count == 1
            else f"creating {count} entities needs {count} free slots of the {cap}"
        )
        slots = eqx.error_if(slots, ~enough, f"World is full: {full} (raise the capacity){by}.")
        parents = jnp.broadcast_to(parent, (count,))
        pslot = jnp.where(parents >= 0, parents % cap, 0)
        p_ok = (parents == NULL_ENTITY) | (
            (parents >= 0) & self.alive[pslot] & (self.generation[pslot] == parents // cap)
        )
        slots = eqx.error_if(
            slots, ~jnp.all(p_ok), "World.create_entities: a parent entity does not exist (stale or invalid)."
        )
        gen = self.generation[slots]
        limit = (2**31 - 1) // cap
        slots = eqx.error_if(
            slots,
            jnp.any(gen >= limit),
            f"World: a slot was reused {limit} times; entity handles would overflow int32.",
        )
        comps = {}
        for k, c in self.components.items():
            if k in values:
                comps[k] = Column(
                    c.data.at[slots].set(values[k]), c.present.at[slots].set(True), c.changed.at[slots].set(2)
                )
            else:
                comps[k] = Column(c.data, c.present.at[slots].set(False), c.changed.at[slots].set(0))
        world = dataclasses.replace(
            self,
            alive=self.alive.at[slots].set(True),
            new=self.new.at[slots].set(True),
            removing=self.removing.at[slots].set(False),
            parent=self.parent.at[slots].set(parents),
            components=comps,
        )
        return world, gen * cap + slots

    def clone(self, entity: Any, parent: Any = NULL_ENTITY) -> tuple[World, Array]:
        """A copy of ``entity`` and all its descendants, with their components, under ``parent``
        (gz-sim ``Clone``): new entities in the first free slots (new, their components one-time
        changes), the copies of descendants under the copies of their parents. Returns (world, the
        copy's handle); NULL_ENTITY and the world unchanged when ``entity`` names no entity (gz-sim
        returns kNullEntity). An error (``error_if``) when too few slots are free. May be traced."""
        slot, ok = self.slot_of(entity)
        parent = jnp.asarray(parent, jnp.int32)
        p_ok = (parent == NULL_ENTITY) | self.exists(parent)
        known = _concrete(p_ok)
        if known is not None and not bool(known):
            raise JaxsysError(f"World.clone: parent {int(parent)} does not exist (a stale or invalid handle).")
        ok = ok & p_ok
        roots = jnp.zeros_like(self.alive).at[slot].set(ok)
        world, target = self._copy_subtrees(roots, jnp.full(self.parent.shape, parent, jnp.int32), "cloning")
        cap = self.capacity
        copy = jnp.where(ok, world.handles()[jnp.clip(target[slot], 0, cap - 1)], NULL_ENTITY)
        return world, copy

    def _copy_subtrees(self, roots: Array, root_parents: Array, what: str) -> tuple[World, Array]:
        """Copies of the entities in ``roots`` and their descendants (see `clone`), the copy of root
        ``i`` under ``root_parents[i]``; the world and, per slot, the slot of its copy (capacity: none)."""
        cap = self.capacity
        sub = self._with_descendants(roots & self.alive) & self.alive
        free = ~self.alive
        spawner = _SPAWNER.get()
        by = f"; by {spawner}" if spawner else ""
        free_slots = jnp.nonzero(free, size=cap, fill_value=cap)[0].astype(jnp.int32)
        free_slots = eqx.error_if(
            free_slots, jnp.sum(sub) > jnp.sum(free), f"World is full: {what} needs a free slot per entity copied{by}."
        )
        rank = jnp.cumsum(sub) - 1  # the k-th entity copied (slot order) goes to the k-th free slot
        target = jnp.where(sub, free_slots[jnp.clip(rank, 0, cap - 1)], cap)  # (cap: not copied, dropped)
        handles = self.handles()
        # the copies' parents: the copy of their parent, or the root's parent for a root's copy
        pslot = jnp.where(self.parent >= 0, self.parent % cap, 0)
        copied_parent_slot = target[pslot]
        copied_parent = jnp.where(
            copied_parent_slot < cap, handles[jnp.clip(copied_parent_slot, 0, cap - 1)], NULL_ENTITY
        )
        new_parent = jnp.where(roots, root_parents, copied_parent)
        comps = {}
        for k, c in self.components.items():
            present = c.present & sub
            comps[k] = Column(
                c.data.at[target].set(c.data, mode="drop"),
                c.present.at[target].set(present, mode="drop"),
                c.changed.at[target].set(jnp.where(present, jnp.int8(2), jnp.int8(0)), mode="drop"),
            )
        world = dataclasses.replace(
            self,
            alive=self.alive.at[target].set(True, mode="drop"),
            new=self.new.at[target].set(True, mode="drop"),
            removing=self.removing.at[target].set(False, mode="drop"),
            parent=self.parent.at[target].set(new_parent, mode="drop"),
            pinned=self.pinned.at[target].set(False, mode="drop"),
            recreating=self.recreating.at[target].set(False, mode="drop"),
            components=comps,
        )
        return world, target

    def request_recreate(self, entity: Any) -> World:
        """Ask for ``entity`` (with its descendants) to be re-created (gz-sim's ``Recreate``
        component, handled by the runner): after this step, a copy with a new handle and the same
        parent, components and children, new in the next step, while the original is marked for
        removal (reported by ``each_removed`` during that step, removed at its end). Done by `ecs.run`
        at the end of the step (and by `process_recreate`)."""
        slot, ok = self.slot_of(entity)
        self._check(entity, ok, "request_recreate")
        return dataclasses.replace(
            self,
            recreating=self.recreating.at[slot].set(self.recreating[slot] | ok),
            invalid_operations=self._invalid(ok),
        )

    def process_recreate(self) -> World:
        """Carry out the recreate requests (gz-sim ``ProcessRecreateEntitiesRemove`` / ``Create``): a
        copy of each requested entity under its parent, the original marked for removal."""
        roots = self.recreating & self.alive
        world, _ = self._copy_subtrees(roots, self.parent, "recreating")
        world = world.request_remove_where(roots, recursive=True)
        return dataclasses.replace(world, recreating=jnp.zeros_like(self.recreating))

    def _parent_slots(self) -> tuple[Array, Array]:
        """Per slot: the parent's slot, and whether the parent exists (a removed parent's handle is
        stale and names nothing, whatever reuses its slot)."""
        cap = self.capacity
        p = self.parent
        pslot = jnp.where(p >= 0, p % cap, 0)
        ok = (p >= 0) & self.alive[pslot] & (self.generation[pslot] == p // cap)
        return pslot, ok

    def _with_descendants(self, removing: Array) -> Array:
        """``removing`` with every descendant of a marked entity marked too."""

        def family(removing: Array) -> Array:
            pslot, ok = self._parent_slots()

            def body(c: tuple[Array, Array]) -> tuple[Array, Array]:
                r, _ = c
                r_new = r | (ok & r[pslot] & self.alive)
                return r_new, jnp.any(r_new != r)

            # (one pass per generation of the family tree, until nothing changes)
            return jax.lax.while_loop(lambda c: c[1], body, (removing, jnp.array(True)))[0]

        # (nothing to follow, and no gather over the slots, where no entity has a parent)
        return jax.lax.cond(jnp.any(self.parent >= 0), family, lambda r: r, removing)

    @_fast_when_eager(arrays=("entity",), entities=("entity",))
    def request_remove_entity(self, entity: Any, recursive: bool = True) -> World:
        """Mark ``entity`` (and, if ``recursive``, its descendants) for removal at the end of the step
        (gz-sim ``RequestRemoveEntity``). A handle that names no entity: an error eagerly, a counted
        no-op inside ``jit``."""
        slot, ok = self.slot_of(entity)
        self._check(entity, ok, "request_remove_entity")
        removing = self.removing.at[slot].set(self.removing[slot] | ok)
        if recursive:
            removing = self._with_descendants(removing)
        # (pinned entities are never marked: gz-sim's RequestRemoveEntity skips them)
        return dataclasses.replace(self, removing=removing & ~self.pinned, invalid_operations=self._invalid(ok))

    def request_remove_where(self, mask: Array, recursive: bool = True) -> World:
        """Mark every entity where ``mask`` (per slot) is true (vectorised ``RequestRemoveEntity``)."""
        removing = self.removing | (mask & self.alive)
        if recursive:
            removing = self._with_descendants(removing)
        return dataclasses.replace(self, removing=removing & ~self.pinned)

    def request_remove_entities(self) -> World:
        """Mark every entity that is not pinned for removal (gz-sim ``RequestRemoveEntities``)."""
        return self.request_remove_where(self.alive, recursive=False)

    def pin_entity(self, entity: Any, recursive: bool = True) -> World:
        """Make ``entity`` (and, if ``recursive``, its descendants now) unremovable: removal requests
        leave it alone until it is unpinned (gz-sim ``PinEntity``)."""
        slot, ok = self.slot_of(entity)
        self._check(entity, ok, "pin_entity")
        mark = jnp.zeros_like(self.alive).at[slot].set(ok)
        if recursive:
            mark = self._with_descendants(mark)
        return dataclasses.replace(self, pinned=self.pinned | mark, invalid_operations=self._invalid(ok))

    def unpin_entity(self, entity: Any, recursive: bool = True) -> World:
        """Make ``entity`` (and, if ``recursive``, its descendants) removable again (gz-sim
        ``UnpinEntity``)."""
        slot, ok = self.slot_of(entity)
        self._check(entity, ok, "unpin_entity")
        mark = jnp.zeros_like(self.alive).at[slot].set(ok)
        if recursive:
            mark = self._with_descendants(mark)
        return dataclasses.replace(self, pinned=self.pinned & ~mark, invalid_operations=self._invalid(ok))

    def unpin_all_entities(self) -> World:
        """Every entity removable again (gz-sim ``UnpinAllEntities``)."""
        return dataclasses.replace(self, pinned=jnp.zeros_like(self.pinned))

    def parent_of(self, entity: Any) -> Array:
        """The parent's handle (NULL_ENTITY for none, or when the parent was removed)."""
        slot, ok = self.slot_of(entity)
        self._check(entity, ok, "parent_of")
        _, p_ok = self._parent_slots()
        return jnp.where(ok & p_ok[slot], self.parent[slot], NULL_ENTITY)

    def set_parent(self, entity: Any, parent: Any) -> World:
        """Re-parent ``entity`` under ``parent`` (a handle or NULL_ENTITY) (gz-sim ``SetParentEntity``).
        Refused (error eagerly, counted no-op inside ``jit``) when either names no entity or when
        ``parent`` is ``entity`` or one of its descendants (a cycle)."""
        slot, ok = self.slot_of(entity)
        self._check(entity, ok, "set_parent")
        parent = jnp.asarray(parent, jnp.int32)
        pslot, p_exists = self.slot_of(parent)
        is_null = parent == NULL_ENTITY
        self._check(parent, is_null | p_exists, "set_parent (its parent argument)")
        below = self._with_descendants(jnp.zeros_like(self.alive).at[slot].set(True))  # entity and descendants
        cycle = ~is_null & below[pslot]
        known = _concrete(cycle)
        if known is not None and bool(known):
            raise JaxsysError(
                f"World.set_parent: entity {int(parent)} is {int(entity)} itself or one of its descendants; "
                f"re-parenting would make a cycle."
            )
        valid = ok & (is_null | p_exists) & ~cycle
        new_parent = jnp.where(valid, parent, self.parent[slot])
        return dataclasses.replace(
            self, parent=self.parent.at[slot].set(new_parent), invalid_operations=self._invalid(valid)
        )

    # ----- components -------------------------------------------------------------------------
    def _checked_value(self, name: str, value: Any, what: str) -> Array:
        col = self._column(name)
        v = jnp.asarray(value)
        shape = tuple(col.data.shape[1:])
        if tuple(v.shape) != shape:
            raise JaxsysError(
                f"World.{what}: component {name!r} has shape {shape}; the value has shape {tuple(v.shape)} (no "
                f"broadcasting: give the full value)."
            )
        if jnp.iscomplexobj(v) and not jnp.issubdtype(col.data.dtype, jnp.complexfloating):
            raise JaxsysError(
                f"World.{what}: component {name!r} has dtype {col.data.dtype}; the value is complex ({v.dtype})."
            )
        return v.astype(col.data.dtype)

    @_fast_when_eager(arrays=("entity", "value"), entities=("entity",))
    def create_component(self, entity: Any, name: str, value: Any, periodic: bool = False) -> World:
        """Give ``entity`` component ``name`` with ``value`` (gz-sim ``CreateComponent``; also sets an
        existing one, marking it changed: one-time, or ``periodic``). The value's shape must be the
        component's. A handle that names no entity: an error eagerly, a counted no-op inside ``jit``."""
        col = self._column(name)
        v = self._checked_value(name, value, f"create_component(entity, {name!r})")
        slot, ok = self.slot_of(entity)
        self._check(entity, ok, f"create_component(entity, {name!r})")
        data = col.data.at[slot].set(jnp.where(ok, v, col.data[slot]))
        present = col.present.at[slot].set(col.present[slot] | ok)
        changed = col.changed.at[slot].set(_mark(col.changed[slot], ok, periodic))
        world = self._with_column(name, Column(data, present, changed))
        return dataclasses.replace(world, invalid_operations=self._invalid(ok))

    set_component = create_component

    @_fast_when_eager(arrays=("entity", "value"), entities=("entity",))
    def set_component_data(self, entity: Any, name: str, value: Any) -> tuple[World, Array]:
        """``(world, changed)``: ``entity``'s component ``name`` set to ``value`` (created if missing),
        and whether that changed anything: the component was created or its value differs (gz-sim
        ``SetComponentData``, whose result callers use to skip work). As in gz-sim, an existing
        component's change state is not marked: mark it with `set_changed` where ``changed`` is true
        (or use `set_component`, which always marks it). May be traced."""
        col = self._column(name)
        v = self._checked_value(name, value, f"set_component_data(entity, {name!r})")
        slot, ok = self.slot_of(entity)
        self._check(entity, ok, f"set_component_data(entity, {name!r})")
        had = col.present[slot]
        differs = jnp.any(v != col.data[slot]) | ~had
        data = col.data.at[slot].set(jnp.where(ok, v, col.data[slot]))
        present = col.present.at[slot].set(had | ok)
        # (a component it creates is new: one-time change, as gz-sim's CreateComponent marks it)
        changed = col.changed.at[slot].set(_mark(col.changed[slot], ok & ~had, False))
        world = self._with_column(name, Column(data, present, changed))
        return dataclasses.replace(world, invalid_operations=self._invalid(ok)), ok & differs

    def set_changed(self, entity: Any, name: str, state: Any) -> World:
        """Set the change state of ``entity``'s component ``name`` (gz-sim ``SetChanged``): ``state`` 0
        (``NoChange``), 1 (``PeriodicChange``) or 2 (``OneTimeChange``), replacing the step's state (not
        the stronger of the two). Nothing where the entity lacks the component. May be traced."""
        col = self._column(name)
        slot, ok = self.slot_of(entity)
        self._check(entity, ok, f"set_changed(entity, {name!r})")
        state = jnp.asarray(state)
        known = _concrete(state)
        if known is not None and int(known) not in (0, 1, 2):
            raise JaxsysError(
                f"World.set_changed: state must be 0 (NoChange), 1 (PeriodicChange) or 2 (OneTimeChange); "
                f"got {int(known)}."
            )
        hit = ok & col.present[slot]
        changed = col.changed.at[slot].set(jnp.where(hit, jnp.clip(state, 0, 2), col.changed[slot]).astype(jnp.int8))
        world = self._with_column(name, Column(col.data, col.present, changed))
        return dataclasses.replace(world, invalid_operations=self._invalid(ok))

    def component_state(self, entity: Any, name: str) -> Array:
        """The change state of ``entity``'s component ``name`` this step (gz-sim ``ComponentState``): 0
        ``NoChange`` (also for a removed component, or an entity without it), 1 ``PeriodicChange``, 2
        ``OneTimeChange`` (int8)."""
        slot, ok = self.slot_of(entity)
        c = self._column(name).changed[slot]
        return jnp.where(ok & (c > 0), c, 0).astype(jnp.int8)

    @_fast_when_eager(arrays=("entity",), entities=("entity",))
    def remove_component(self, entity: Any, name: str) -> World:
        """Remove component ``name`` from ``entity`` (gz-sim ``RemoveComponent``): its change state is
        ``NoChange`` from then on (gz-sim), and `each_component_removed` reports it until the end of
        the step."""
        col = self._column(name)
        slot, ok = self.slot_of(entity)
        self._check(entity, ok, f"remove_component(entity, {name!r})")
        hit = ok & col.present[slot]
        present = col.present.at[slot].set(col.present[slot] & ~ok)
        changed = col.changed.at[slot].set(jnp.where(hit, jnp.int8(-1), col.changed[slot]))
        world = self._with_column(name, Column(col.data, present, changed))
        return dataclasses.replace(world, invalid_operations=self._invalid(ok))

    def component(self, entity: Any, name: str) -> Array:
        """The value of component ``name`` of ``entity`` (gz-sim ``ComponentData``). An error (eagerly,
        or inside ``jit`` via ``error_if``) if the entity does not exist or lacks the component; see
        `try_component` for a status instead."""
        value, found = self.try_component(entity, name)
        self._check(entity, self.exists(entity), f"component(entity, {name!r})")
        known = _concrete(found)
        if known is not None and not bool(known):
            raise JaxsysError(f"World.component: entity {int(entity)} has no component {name!r}.")
        return eqx.error_if(
            value, ~found, f"World.component(entity, {name!r}): the entity does not exist or has no {name!r}."
        )

    def try_component(self, entity: Any, name: str) -> tuple[Array, Array]:
        """``(value, found)``: the component's value and whether the entity exists and has it (the
        value is zeros when not found, never another entity's data)."""
        col = self._column(name)
        slot, ok = self.slot_of(entity)
        found = ok & col.present[slot]
        value = col.data[slot]
        return jnp.where(found, value, jnp.zeros_like(value)), found

    def has_component(self, entity: Any, name: str) -> Array:
        """Whether ``entity`` exists and has component ``name`` (gz-sim ``EntityHasComponentType``)."""
        slot, ok = self.slot_of(entity)
        return ok & self._column(name).present[slot]

    def column(self, name: str) -> Array:
        """All rows of component ``name`` (capacity, *shape); rows without the component are meaningless."""
        return self._column(name).data

    def set_column(self, name: str, data: Any, where: Any = None, periodic: bool = False) -> World:
        """Write rows of component ``name`` from ``data`` (capacity, *shape) for the entities in
        ``where`` (default: those that have the component), marking them changed (one-time, or
        ``periodic``); other rows keep their values. Entities in ``where`` without the component get it."""
        col = self._column(name)
        data = jnp.asarray(data)
        if data.shape != col.data.shape:
            raise JaxsysError(
                f"World.set_column({name!r}): data of shape {data.shape}; the column has shape {col.data.shape} "
                f"(capacity {self.capacity} rows of {col.data.shape[1:]})."
            )
        mask = self.each([name]) if where is None else jnp.asarray(where, bool) & self.alive
        # (rows of entities that have the component: their presence is unchanged)
        present = col.present if where is None else col.present | mask
        new = Column(
            _select_rows(mask, data.astype(col.data.dtype), col.data), present, _mark(col.changed, mask, periodic)
        )
        return self._with_column(name, new)

    def _with_column(self, name: str, col: Column) -> World:
        comps = dict(self.components)
        comps[name] = col
        return dataclasses.replace(self, components=comps)

    # ----- queries (vectorised Each / EachNew / EachRemoved) ----------------------------------
    def each(self, names: Sequence[str]) -> Array:
        """Mask of the entities having all of ``names`` (gz-sim ``Each<...>``; includes entities
        marked for removal, as gz-sim does)."""
        mask = self.alive
        for n in names:
            mask = mask & self._column(n).present
        return mask

    def each_new(self, names: Sequence[str] = ()) -> Array:
        """Entities created this step having all of ``names`` (gz-sim ``EachNew``)."""
        return self.each(names) & self.new

    def each_removed(self, names: Sequence[str] = ()) -> Array:
        """Entities to be removed at the end of this step having all of ``names`` (gz-sim ``EachRemoved``)."""
        return self.each(names) & self.removing

    def each_changed(self, name: str, kind: str = "any") -> Array:
        """Entities whose component ``name`` was written this step: ``kind`` "any",
        "one_time" (gz-sim's ``ComponentState::OneTimeChange``) or "periodic" (``PeriodicChange``);
        cleared at the end of the step."""
        level = {"any": 1, "periodic": 1, "one_time": 2}.get(kind)
        if level is None:
            raise JaxsysError(f"World.each_changed: kind must be 'any', 'one_time' or 'periodic'; got {kind!r}.")
        c = self._column(name).changed
        hit = c == 1 if kind == "periodic" else c >= level
        return self.alive & hit

    def each_component_removed(self, name: str) -> Array:
        """Entities whose component ``name`` was removed this step (and not given back): gz-sim's
        removed components, cleared at the end of the step (``RunClearRemovedComponents``)."""
        return self.alive & (self._column(name).changed == -1)

    def count(self, names: Sequence[str] = ()) -> Array:
        """Number of entities having all of ``names``."""
        return jnp.sum(self.each(names))

    def apply(
        self, names: Sequence[str], fn: Callable[..., Any], outputs: Sequence[str] | None = None, periodic: bool = False
    ) -> World:
        """Vectorised system body: for every entity with all of ``names``, replace the ``outputs``
        columns (default: ``names``) by ``fn(*rows)`` (one row per component), evaluated for all slots
        with ``vmap`` and committed only where the entity matches (marking them changed)."""
        outputs = list(outputs or names)
        mask = self.each(names)
        new = jax.vmap(fn)(*[self._column(n).data for n in names])
        if not isinstance(new, (tuple, list)):
            new = (new,)
        if len(new) != len(outputs):
            raise JaxsysError(
                f"World.apply: fn returned {len(new)} value(s) for {len(outputs)} output component(s) {outputs}."
            )
        world = self
        for name, value in zip(outputs, new):
            col = world._column(name)
            value = jnp.asarray(value)
            if value.shape != col.data.shape:
                raise JaxsysError(
                    f"World.apply: fn's value for component {name!r} has per-entity shape {value.shape[1:]}; the "
                    f"component has shape {col.data.shape[1:]}."
                )
            if name in names:
                # (the mask implies the component: its presence is unchanged, the same array, so the
                # runner sees a step that adds no component; see ecs.run's lean passes)
                data = _select_rows(mask, value.astype(col.data.dtype), col.data)
                changed = _mark(col.changed, mask, periodic)
                writes = _APPLY_WRITES.get()
                if writes is not None:
                    source = (self.alive, {n: self._column(n).present for n in names})
                    for array, before in ((data, col.data), (changed, col.changed)):
                        writes[id(array)] = (array, before, frozenset(names), *source)
                world = world._with_column(name, Column(data, col.present, changed))
            else:
                world = world.set_column(name, value, where=mask, periodic=periodic)
        return world

    # ----- world control (applied by the runner at the end of the step) ---------------------------
    def request_pause(self, pause: Any = True) -> World:
        """Ask the runner to pause from the next step where ``pause`` is true (gz-sim's ``events::Pause``
        / WorldControl ``pause``); where it is false this is no request (an earlier request of the step
        stands), so a watchdog may call ``world.request_pause(condition)`` every step. To play, use
        `request_play`. May be traced."""
        p = jnp.where(jnp.asarray(pause, bool), jnp.int32(1), self.control.pause)
        return dataclasses.replace(self, control=dataclasses.replace(self.control, pause=p))

    def request_play(self, play: Any = True) -> World:
        """Ask the runner to play (un-pause) from the next step where ``play`` is true (WorldControl
        ``pause: false``); false is no request. May be traced."""
        p = jnp.where(jnp.asarray(play, bool), jnp.int32(0), self.control.pause)
        return dataclasses.replace(self, control=dataclasses.replace(self.control, pause=p))

    def request_multi_step(self, steps: Any) -> World:
        """While paused, take ``steps`` more steps, then pause again (WorldControl ``multi_step``)."""
        n = jnp.asarray(steps, jnp.int32)
        return dataclasses.replace(self, control=dataclasses.replace(self.control, multi_step=n))

    def request_reset(self, reset: Any = True) -> World:
        """Rewind to the run's initial world at the end of this step (WorldControl ``reset``): the
        next pass calls the systems' ``reset`` phase only; entities created since the initial world
        are reported by ``each_removed`` there."""
        r = self.control.reset | jnp.asarray(reset, bool)
        return dataclasses.replace(self, control=dataclasses.replace(self.control, reset=r))

    def request_stop(self, stop: Any = True) -> World:
        """End the run at the end of this step (gz-sim's ``events::Stop``): the run's later steps do
        nothing and ``world.control.stopped`` is set."""
        st = self.control.stop | jnp.asarray(stop, bool)
        return dataclasses.replace(self, control=dataclasses.replace(self.control, stop=st))

    def reset_to(self, initial: World) -> World:
        """``initial``'s entities and components back (their handles too, as gz-sim's
        ``ResetTo``), entities created since then kept for this step and marked for removal (so
        ``each_removed`` reports them). New: what was new in ``initial`` (gz-sim copies the snapshot's
        newly-created set) and restored entities that did not exist."""
        same = self.alive & initial.alive & (self.generation == initial.generation)
        extra = self.alive & ~initial.alive
        alive = initial.alive | extra
        comps = {}
        for k, c in self.components.items():
            c0 = initial.components[k]
            m = extra.reshape((-1,) + (1,) * (c.data.ndim - 1))
            comps[k] = Column(
                jnp.where(m, c.data, c0.data), jnp.where(extra, c.present, c0.present), alive.astype(jnp.int8) * 2
            )
        return dataclasses.replace(
            self,
            alive=alive,
            new=(initial.alive & initial.new) | (initial.alive & ~same),
            removing=extra,
            parent=jnp.where(extra, self.parent, initial.parent),
            components=comps,
            generation=jnp.where(extra, self.generation, initial.generation),
            pinned=jnp.where(extra, self.pinned, initial.pinned),
            recreating=jnp.zeros_like(self.recreating),
            control=Control.none(),
        )

    # ----- end of step ------------------------------------------------------------------------
    def _end_of_step_changes_only(self) -> World:
        """`end_of_step` for a world whose entities and component presence no step changes (the
        runner's lean pass, see `ecs.run`): removal requests, new flags, parents, generations and pins
        are already settled, so only the change flags are cleared."""
        comps = {k: Column(c.data, c.present, jnp.zeros_like(c.changed)) for k, c in self.components.items()}
        return dataclasses.replace(self, components=comps)

    def _settled_array(self) -> jax.Array:
        """A bool scalar: nothing for `end_of_step` to settle but change flags (see `_settled`)."""
        arrays = [self.removing, self.new, *(c.present & ~self.alive for c in self.components.values())]
        return ~functools.reduce(jnp.logical_or, [jnp.any(a) for a in arrays])

    def _settled(self) -> bool:
        """Known (not traced) to have nothing for `end_of_step` to settle but change flags: no removal
        request, no new entity, no component of a dead slot."""
        settled = self._settled_array()
        return not isinstance(settled, jax.core.Tracer) and bool(settled)

    def end_of_step(self) -> World:
        """Clear *new* and the change flags, carry out removal requests, drop components of removed
        entities and advance the generation of the freed slots (the order of gz-sim's
        ``SimulationRunner::Step``)."""
        removed = self.alive & self.removing
        alive = self.alive & ~self.removing
        z = jnp.zeros_like(self.alive)
        comps = {k: Column(c.data, c.present & alive, jnp.zeros_like(c.changed)) for k, c in self.components.items()}
        return dataclasses.replace(
            self,
            alive=alive,
            new=z,
            removing=z,
            parent=jnp.where(alive, self.parent, NULL_ENTITY),
            components=comps,
            generation=self.generation + removed.astype(jnp.int32),
            pinned=self.pinned & alive,
        )


@functools.partial(jax.jit, static_argnums=1)
def _create_entities_compiled(world: World, count: int, parent: Array, values: dict[str, Array]) -> tuple[World, Array]:
    """`World.create_entities` as one compiled program (an eager call)."""
    return world._create_entities(count, parent, values)


class WorldView(eqx.Module):
    """Read-only access to a World, given to ``post_update`` (gz-sim's const EntityComponentManager):
    queries and getters only; there is no method that returns a changed world."""

    _world: World

    def each(self, names: Sequence[str]) -> Array:
        """See `World.each`."""
        return self._world.each(names)

    def each_new(self, names: Sequence[str] = ()) -> Array:
        """See `World.each_new`."""
        return self._world.each_new(names)

    def each_removed(self, names: Sequence[str] = ()) -> Array:
        """See `World.each_removed`."""
        return self._world.each_removed(names)

    def count(self, names: Sequence[str] = ()) -> Array:
        """See `World.count`."""
        return self._world.count(names)

    def component(self, entity: Any, name: str) -> Array:
        """See `World.component`."""
        return self._world.component(entity, name)

    def try_component(self, entity: Any, name: str) -> tuple[Array, Array]:
        """See `World.try_component`."""
        return self._world.try_component(entity, name)

    def exists(self, entity: Any) -> Array:
        """See `World.exists`."""
        return self._world.exists(entity)

    def each_changed(self, name: str, kind: str = "any") -> Array:
        """See `World.each_changed`."""
        return self._world.each_changed(name, kind)

    def each_component_removed(self, name: str) -> Array:
        """See `World.each_component_removed`."""
        return self._world.each_component_removed(name)

    def component_state(self, entity: Any, name: str) -> Array:
        """See `World.component_state`."""
        return self._world.component_state(entity, name)

    def handles(self) -> Array:
        """See `World.handles`."""
        return self._world.handles()

    def has_component(self, entity: Any, name: str) -> Array:
        """See `World.has_component`."""
        return self._world.has_component(entity, name)

    def column(self, name: str) -> Array:
        """See `World.column` (a copy of the data: writing to it changes nothing)."""
        return self._world.column(name)

    @property
    def alive(self) -> Array:
        """Which slots hold entities."""
        return self._world.alive

    @property
    def capacity(self) -> int:
        """The number of entity slots."""
        return self._world.capacity
