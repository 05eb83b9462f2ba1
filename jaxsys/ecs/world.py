"""The World: entities and components as struct-of-arrays pytrees (gz-sim's EntityComponentManager).

An entity is a slot index in ``[0, capacity)``. Each component type is a :class:`Column`: a data array
with one row per slot and a presence mask. Everything is arrays of static shape, so a World passes
through ``jit``, batches under ``vmap`` and differentiates with respect to float component data.

gz-sim semantics kept: a created entity is visible at once and counts as *new* until the end of the
step; removal is a request carried out at the end of the step (recursive over children by default);
``each`` includes entities marked for removal; running out of capacity is an error (``error_if``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from ..framework.errors import JaxsysError


Array = jax.Array
NULL_ENTITY = -1


class Column(eqx.Module):
    """One component type: ``data`` (capacity, *shape) and ``present`` (capacity,)."""

    data: Array
    present: Array


class World(eqx.Module):
    """Entities (slots) and their components.

    **Fields:** `alive`, `new`, `removing` (bool, capacity), `parent` (int32, capacity; -1 none),
    `components` (name -> :class:`Column`; the names are static structure).
    """

    alive: Array
    new: Array
    removing: Array
    parent: Array
    components: dict[str, Column]

    @staticmethod
    def empty(capacity: int, components: Mapping[str, Any]) -> World:
        """An empty world with room for ``capacity`` entities and these component types.

        ``components``: name -> an example value (its shape and dtype define the column).
        """
        if capacity <= 0:
            raise JaxsysError(f"World.empty: capacity must be > 0; got {capacity}.")
        cols = {}
        for name, example in components.items():
            ex = jnp.asarray(example)
            cols[name] = Column(jnp.zeros((capacity,) + ex.shape, ex.dtype), jnp.zeros((capacity,), bool))
        z = jnp.zeros((capacity,), bool)
        return World(z, z, z, jnp.full((capacity,), NULL_ENTITY, jnp.int32), cols)

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

    # ----- entities ---------------------------------------------------------------------------
    def create_entity(self, parent: Any = NULL_ENTITY) -> tuple[World, Array]:
        """A new entity in the first free slot: visible at once, *new* until the end of the step
        (gz-sim ``CreateEntity``). Raises (inside ``jit`` via ``error_if``) when the world is full."""
        free = ~self.alive
        idx = jnp.argmax(free).astype(jnp.int32)
        idx = eqx.error_if(
            idx, ~jnp.any(free), f"World is full: all {self.capacity} entity slots are in use (raise the capacity)."
        )
        world = dataclasses.replace(
            self,
            alive=self.alive.at[idx].set(True),
            new=self.new.at[idx].set(True),
            removing=self.removing.at[idx].set(False),
            parent=self.parent.at[idx].set(jnp.asarray(parent, jnp.int32)),
            components={k: Column(c.data, c.present.at[idx].set(False)) for k, c in self.components.items()},
        )
        return world, idx

    def create_entities(self, count: int) -> tuple[World, Array]:
        """``count`` new entities (static count); returns their slots."""
        world, ids = self, []
        for _ in range(count):
            world, i = world.create_entity()
            ids.append(i)
        return world, jnp.stack(ids)

    def request_remove_entity(self, entity: Any, recursive: bool = True, max_depth: int = 16) -> World:
        """Mark ``entity`` (and, if ``recursive``, its descendants) for removal at the end of the step
        (gz-sim ``RequestRemoveEntity``)."""
        removing = self.removing.at[entity].set(self.alive[entity] | self.removing[entity])
        if recursive:
            for _ in range(max_depth):
                has_parent = self.parent >= 0
                removing = removing | (has_parent & removing[jnp.clip(self.parent, 0)] & self.alive)
        return dataclasses.replace(self, removing=removing)

    def request_remove_where(self, mask: Array, recursive: bool = True, max_depth: int = 16) -> World:
        """Mark every entity where ``mask`` is true (vectorised ``RequestRemoveEntity``)."""
        removing = self.removing | (mask & self.alive)
        if recursive:
            for _ in range(max_depth):
                removing = removing | ((self.parent >= 0) & removing[jnp.clip(self.parent, 0)] & self.alive)
        return dataclasses.replace(self, removing=removing)

    # ----- components -------------------------------------------------------------------------
    def create_component(self, entity: Any, name: str, value: Any) -> World:
        """Give ``entity`` component ``name`` with ``value`` (gz-sim ``CreateComponent``); an error if
        the entity does not exist."""
        col = self._column(name)
        entity = eqx.error_if(
            jnp.asarray(entity, jnp.int32), ~self.alive[entity], f"create_component({name!r}): no such entity."
        )
        data = col.data.at[entity].set(jnp.asarray(value, col.data.dtype))
        return self._with_column(name, Column(data, col.present.at[entity].set(True)))

    set_component = create_component

    def remove_component(self, entity: Any, name: str) -> World:
        """Remove component ``name`` from ``entity`` (gz-sim ``RemoveComponent``)."""
        col = self._column(name)
        return self._with_column(name, Column(col.data, col.present.at[entity].set(False)))

    def component(self, entity: Any, name: str) -> Array:
        """The value of component ``name`` of ``entity`` (gz-sim ``ComponentData``)."""
        return self._column(name).data[entity]

    def has_component(self, entity: Any, name: str) -> Array:
        """Whether ``entity`` has component ``name`` (gz-sim ``EntityHasComponentType``)."""
        return self.alive[entity] & self._column(name).present[entity]

    def column(self, name: str) -> Array:
        """All rows of component ``name`` (capacity, *shape); rows without the component are meaningless."""
        return self._column(name).data

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

    def count(self, names: Sequence[str] = ()) -> Array:
        """Number of entities having all of ``names``."""
        return jnp.sum(self.each(names))

    def apply(self, names: Sequence[str], fn: Callable[..., Any], outputs: Sequence[str] | None = None) -> World:
        """Vectorised system body: for every entity with all of ``names``, replace the ``outputs``
        columns (default: ``names``) by ``fn(*rows)`` (one row per component), evaluated for all slots
        with ``vmap`` and committed only where the entity matches."""
        outputs = list(outputs or names)
        mask = self.each(names)
        new = jax.vmap(fn)(*[self._column(n).data for n in names])
        if not isinstance(new, (tuple, list)):
            new = (new,)
        world = self
        for name, value in zip(outputs, new):
            col = world._column(name)
            m = mask.reshape((-1,) + (1,) * (col.data.ndim - 1))
            world = world._with_column(
                name, Column(jnp.where(m, jnp.asarray(value, col.data.dtype), col.data), col.present | mask)
            )
        return world

    # ----- end of step ------------------------------------------------------------------------
    def end_of_step(self) -> World:
        """Clear *new*, carry out removal requests, drop components of removed entities (the order of
        gz-sim's ``SimulationRunner::Step``)."""
        alive = self.alive & ~self.removing
        z = jnp.zeros_like(self.alive)
        comps = {k: Column(c.data, c.present & alive) for k, c in self.components.items()}
        return World(alive, z, z, jnp.where(alive, self.parent, NULL_ENTITY), comps)


class WorldView(eqx.Module):
    """Read-only access to a World, given to ``post_update`` (gz-sim's const EntityComponentManager):
    queries and getters only; there is no method that returns a changed world."""

    _world: World

    def each(self, names: Sequence[str]) -> Array:
        """See :meth:`World.each`."""
        return self._world.each(names)

    def each_new(self, names: Sequence[str] = ()) -> Array:
        """See :meth:`World.each_new`."""
        return self._world.each_new(names)

    def each_removed(self, names: Sequence[str] = ()) -> Array:
        """See :meth:`World.each_removed`."""
        return self._world.each_removed(names)

    def count(self, names: Sequence[str] = ()) -> Array:
        """See :meth:`World.count`."""
        return self._world.count(names)

    def component(self, entity: Any, name: str) -> Array:
        """See :meth:`World.component`."""
        return self._world.component(entity, name)

    def has_component(self, entity: Any, name: str) -> Array:
        """See :meth:`World.has_component`."""
        return self._world.has_component(entity, name)

    def column(self, name: str) -> Array:
        """See :meth:`World.column` (a copy of the data: writing to it changes nothing)."""
        return self._world.column(name)

    @property
    def alive(self) -> Array:
        """Which slots hold entities."""
        return self._world.alive

    @property
    def capacity(self) -> int:
        """The number of entity slots."""
        return self._world.capacity
