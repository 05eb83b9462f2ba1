"""Contexts, states and parameters: the explicit, immutable pytrees that hold everything that varies.

Drake keeps time, state, parameters and fixed input values in a mutable ``Context`` owned by the
caller. In jaxsys a Context is an immutable pytree (an ``equinox.Module``): every setter returns a
*new* context, so a context can be passed through ``jax.jit``, batched by ``jax.vmap`` and
differentiated by ``jax.grad``. Structure (sizes, the owning system's id) is static; values are
leaves.

Layouts follow Drake:

* a leaf's continuous state is one vector ``x = [q, v, z]`` (``num_q``, ``num_v``, ``num_z``);
* a Diagram's continuous state is ``[q of every leaf, v of every leaf, z of every leaf]`` (Drake's
  ``DiagramContinuousState``), its discrete groups, abstract states and parameters are those of its
  leaves, in subsystem order.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .errors import StateError
from .ids import INVALID_SYSTEM_ID, describe_system_id


Array = jax.Array


def _static(default: Any) -> Any:
    """A dataclass field that is structure (part of the pytree definition), not data."""
    return dataclasses.field(default=default, metadata={"static": True})


def _pytree_dataclass(cls: type) -> type:
    """A frozen dataclass registered as a pytree; static fields are metadata.

    Contexts are plain registered dataclasses rather than equinox Modules because JAX flattens
    those in C++: a diagram's context has thousands of nodes and is flattened at every jit call.
    """
    cls = dataclasses.dataclass(frozen=True, eq=False)(cls)
    fields = dataclasses.fields(cls)
    data = [f.name for f in fields if not f.metadata.get("static")]
    meta = [f.name for f in fields if f.metadata.get("static")]
    cls._is_id_bearer = True  # type: ignore[attr-defined]
    return jax.tree_util.register_dataclass(cls, data_fields=data, meta_fields=meta)


def is_id_bearer(x: Any) -> bool:
    """True for the objects that carry a system id (contexts, states, parameters, outputs)."""
    return getattr(type(x), "_is_id_bearer", False) and dataclasses.is_dataclass(x)


def default_float_dtype() -> Any:
    """The floating dtype jaxsys allocates with: float64 when ``jax_enable_x64`` is on, else float32."""
    return jax.dtypes.canonicalize_dtype(jnp.float64)


def as_float_array(value: Any, dtype: Any = None) -> Array:
    """``value`` as a JAX array of a floating dtype (``dtype``, or the default float dtype)."""
    arr = jnp.asarray(value)
    if dtype is None:
        dtype = arr.dtype if jnp.issubdtype(arr.dtype, jnp.floating) else default_float_dtype()
    return jnp.asarray(arr, dtype=dtype)


def _shape_str(value: Any) -> str:
    shape = getattr(value, "shape", None)
    return str(tuple(shape)) if shape is not None else f"a {type(value).__name__}"


def _check_vector(owner_id: int, what: str, old: Array, new: Any) -> Array:
    new_shape = getattr(new, "shape", None)
    if new_shape is None:
        new_shape = np.shape(new)
    if tuple(new_shape) != tuple(old.shape):
        raise StateError(
            f"{what} of System {describe_system_id(owner_id)} has shape {tuple(old.shape)}; "
            f"the value given has shape {tuple(new_shape)}."
        )
    return jnp.asarray(new, dtype=old.dtype)


def _cast_tree(tree: Any, dtype: Any) -> Any:
    def cast(leaf: Any) -> Any:
        if isinstance(leaf, (jax.Array, np.ndarray)) and jnp.issubdtype(leaf.dtype, jnp.floating):
            return jnp.asarray(leaf, dtype=dtype)
        return leaf

    return jax.tree_util.tree_map(cast, tree)


@_pytree_dataclass
class ContinuousState:
    """The continuous state ``x = [q, v, z]`` (Drake's ``ContinuousState``).

    **Fields:**
    - `x`: the whole vector, shape ``(num_q + num_v + num_z,)``.
    - `num_q`, `num_v`, `num_z`: sizes of the generalized positions, velocities and other states.
    - `system_id`: id of the System that made it (static).
    """

    x: Array
    num_q: int = _static(0)
    num_v: int = _static(0)
    num_z: int = _static(0)
    system_id: int = _static(INVALID_SYSTEM_ID)

    def size(self) -> int:
        """Total number of continuous states (Drake: ``size()``)."""
        return self.num_q + self.num_v + self.num_z

    def get_vector(self) -> Array:
        """The whole vector x (Drake: ``get_vector()``/``CopyToVector()``)."""
        return self.x

    def get_generalized_position(self) -> Array:
        """q, shape ``(num_q,)`` (Drake: ``get_generalized_position``)."""
        return self.x[: self.num_q]

    def get_generalized_velocity(self) -> Array:
        """v, shape ``(num_v,)`` (Drake: ``get_generalized_velocity``)."""
        return self.x[self.num_q : self.num_q + self.num_v]

    def get_misc_continuous_state(self) -> Array:
        """z, shape ``(num_z,)`` (Drake: ``get_misc_continuous_state``)."""
        return self.x[self.num_q + self.num_v :]

    def with_vector(self, x: Any) -> ContinuousState:
        """A copy holding ``x`` (same size and dtype) (Drake: ``SetFromVector``)."""
        return ContinuousState(
            _check_vector(self.system_id, "The continuous state", self.x, x),
            self.num_q,
            self.num_v,
            self.num_z,
            self.system_id,
        )


@_pytree_dataclass
class DiscreteValues:
    """Groups of discrete state variables (Drake's ``DiscreteValues``): a tuple of 1-D arrays."""

    groups: tuple[Array, ...]
    system_id: int = _static(INVALID_SYSTEM_ID)

    def num_groups(self) -> int:
        """Number of groups (Drake: ``num_groups``)."""
        return len(self.groups)

    def get_vector(self, index: int = 0) -> Array:
        """The vector of group ``index`` (Drake: ``get_vector(index)``)."""
        if not 0 <= index < len(self.groups):
            raise StateError(
                f"Discrete state group {index} requested of System "
                f"{describe_system_id(self.system_id)}, which has {len(self.groups)} group(s)."
            )
        return self.groups[index]

    def with_vector(self, index: int, value: Any) -> DiscreteValues:
        """A copy with group ``index`` set to ``value`` (same size) (Drake: ``set_value``)."""
        old = self.get_vector(index)
        new = _check_vector(self.system_id, f"Discrete state group {index}", old, value)
        groups = self.groups[:index] + (new,) + self.groups[index + 1 :]
        return DiscreteValues(groups, self.system_id)


@_pytree_dataclass
class AbstractValues:
    """Abstract state values (Drake's ``AbstractValues``): a tuple of arbitrary pytrees."""

    values: tuple[Any, ...]
    system_id: int = _static(INVALID_SYSTEM_ID)

    def size(self) -> int:
        """Number of abstract values."""
        return len(self.values)

    def get_value(self, index: int) -> Any:
        """Value ``index``."""
        if not 0 <= index < len(self.values):
            raise StateError(
                f"Abstract state {index} requested of System {describe_system_id(self.system_id)}, "
                f"which has {len(self.values)} abstract state(s)."
            )
        return self.values[index]

    def with_value(self, index: int, value: Any) -> AbstractValues:
        """A copy with value ``index`` replaced; the pytree structure and shapes must not change."""
        old = self.get_value(index)
        _check_same_structure(self.system_id, f"Abstract state {index}", old, value)
        return AbstractValues(self.values[:index] + (value,) + self.values[index + 1 :], self.system_id)


def _check_same_structure(owner_id: int, what: str, old: Any, new: Any) -> None:
    old_def = jax.tree_util.tree_structure(old)
    new_def = jax.tree_util.tree_structure(new)
    if old_def != new_def:
        raise StateError(
            f"{what} of System {describe_system_id(owner_id)} has structure {old_def}; "
            f"the value given has structure {new_def}."
        )
    for a, b in zip(jax.tree_util.tree_leaves(old), jax.tree_util.tree_leaves(new)):
        if np.shape(a) != np.shape(b):
            raise StateError(
                f"{what} of System {describe_system_id(owner_id)}: a leaf of shape {np.shape(a)} "
                f"was given a value of shape {np.shape(b)}."
            )


@_pytree_dataclass
class State:
    """The whole state: continuous, discrete and abstract (Drake's ``State``)."""

    continuous_state: ContinuousState
    discrete_state: DiscreteValues
    abstract_state: AbstractValues
    system_id: int = _static(INVALID_SYSTEM_ID)

    def get_continuous_state(self) -> ContinuousState:
        """Drake: ``get_continuous_state``."""
        return self.continuous_state

    def get_discrete_state(self, index: int | None = None) -> Any:
        """All groups (``index=None``) or the vector of one group (Drake: ``get_discrete_state``)."""
        if index is None:
            return self.discrete_state
        return self.discrete_state.get_vector(index)

    def get_abstract_state(self, index: int | None = None) -> Any:
        """All abstract values (``index=None``) or one (Drake: ``get_abstract_state``)."""
        if index is None:
            return self.abstract_state
        return self.abstract_state.get_value(index)


@_pytree_dataclass
class Parameters:
    """Numeric (vector) and abstract parameters (Drake's ``Parameters``)."""

    numeric: tuple[Array, ...]
    abstract: tuple[Any, ...]
    system_id: int = _static(INVALID_SYSTEM_ID)

    def num_numeric_parameter_groups(self) -> int:
        """Drake: ``num_numeric_parameter_groups``."""
        return len(self.numeric)

    def num_abstract_parameters(self) -> int:
        """Drake: ``num_abstract_parameters``."""
        return len(self.abstract)

    def get_numeric_parameter(self, index: int) -> Array:
        """Numeric parameter group ``index`` (a 1-D array)."""
        if not 0 <= index < len(self.numeric):
            raise StateError(
                f"Numeric parameter {index} requested of System "
                f"{describe_system_id(self.system_id)}, which has {len(self.numeric)}."
            )
        return self.numeric[index]

    def get_abstract_parameter(self, index: int) -> Any:
        """Abstract parameter ``index`` (any pytree)."""
        if not 0 <= index < len(self.abstract):
            raise StateError(
                f"Abstract parameter {index} requested of System "
                f"{describe_system_id(self.system_id)}, which has {len(self.abstract)}."
            )
        return self.abstract[index]


@_pytree_dataclass
class SystemOutput:
    """The values of all of a system's output ports (Drake's ``SystemOutput``)."""

    values: tuple[Any, ...]
    system_id: int = _static(INVALID_SYSTEM_ID)

    def num_ports(self) -> int:
        """Number of output ports."""
        return len(self.values)

    def get_vector_data(self, index: int) -> Any:
        """The value of output port ``index`` (Drake: ``get_vector_data``)."""
        return self.values[index]

    def get_data(self, index: int) -> Any:
        """The value of output port ``index`` (Drake: ``get_data``)."""
        return self.values[index]


def _strip_ids(tree: Any) -> Any:
    """Rebuild every id-bearing module in ``tree`` with ``system_id = INVALID_SYSTEM_ID``."""
    if is_id_bearer(tree):
        changes = {
            f.name: _strip_ids(getattr(tree, f.name))
            for f in dataclasses.fields(tree)
            if f.name not in ("system_id", "layout")
        }
        if isinstance(getattr(tree, "layout", None), PackLayout):
            changes["layout"] = tree.layout.with_member_ids(lambda p, m, sid: INVALID_SYSTEM_ID)
        return dataclasses.replace(tree, system_id=INVALID_SYSTEM_ID, **changes)
    if isinstance(tree, tuple):
        return tuple(_strip_ids(t) for t in tree)
    return tree


class Context(abc.ABC):
    """Abstract base of :class:`LeafContext` and :class:`DiagramContext` (Drake's ``Context``).

    A Context holds time, state, parameters and fixed input values. It is immutable: ``with_*``
    methods return a new context. Contexts are created by ``system.create_default_context()``
    and carry the creating system's id; every System method checks it.
    """

    # Subclasses define the fields ``time``, ``inputs`` and ``system_id`` (static).

    # --- structure ---------------------------------------------------------------------------
    @abc.abstractmethod
    def _leaf_contexts(self) -> list[LeafContext]:
        """The leaf contexts in subsystem (depth-first) order."""

    @abc.abstractmethod
    def _with_leaf_contexts(self, leaves: Sequence[LeafContext]) -> Context:
        """A copy with the leaf contexts replaced (same order as ``_leaf_contexts``)."""

    def get_system_id(self) -> int:
        """The id of the system that created this context (0 = none)."""
        return self.system_id

    # --- time --------------------------------------------------------------------------------
    def get_time(self) -> Array:
        """The time t in seconds (Drake: ``get_time``)."""
        return self.time

    @abc.abstractmethod
    def with_time(self, t: Any) -> Context:
        """A copy at time ``t`` (Drake: ``SetTime``); a Diagram sets it in every subcontext."""

    # --- continuous state --------------------------------------------------------------------
    def num_continuous_states(self) -> int:
        """Total number of continuous states (Drake: ``num_continuous_states``)."""
        return self.get_continuous_state().size()

    # (a leaf's own state; DiagramContext overrides these with its block-wise versions)
    def get_continuous_state(self) -> ContinuousState:
        """The continuous state, Drake's [q, v, z] ordering (Drake: ``get_continuous_state``)."""
        (leaf,) = self._leaf_contexts()
        cs = leaf.state.continuous_state
        return ContinuousState(cs.x, cs.num_q, cs.num_v, cs.num_z, self.system_id)

    def get_continuous_state_vector(self) -> Array:
        """The continuous state vector x (Drake: ``get_continuous_state_vector().CopyToVector()``)."""
        return self.get_continuous_state().x

    def with_continuous_state(self, x: Any) -> Context:
        """A copy with continuous state ``x`` (a vector or ContinuousState; Drake: ``SetContinuousState``)."""
        if isinstance(x, ContinuousState):
            x = x.x
        (leaf,) = self._leaf_contexts()
        c = leaf.state.continuous_state
        shape = tuple(getattr(x, "shape", np.shape(x)))
        if shape != (c.size(),):
            raise StateError(
                f"The continuous state of System {describe_system_id(self.system_id)} has size {c.size()} "
                f"(num_q={c.num_q}, num_v={c.num_v}, num_z={c.num_z}); the value given has shape {shape}."
            )
        if c.size() == 0:
            return self
        cs = ContinuousState(jnp.asarray(x, dtype=c.x.dtype), c.num_q, c.num_v, c.num_z, c.system_id)
        return self._with_leaf_contexts([leaf._replace_state(continuous_state=cs)])

    # --- discrete state ----------------------------------------------------------------------
    def _discrete_index(self) -> list[tuple[int, int]]:
        out = []
        for i, leaf in enumerate(self._leaf_contexts()):
            out.extend((i, g) for g in range(leaf.state.discrete_state.num_groups()))
        return out

    def num_discrete_state_groups(self) -> int:
        """Number of discrete state groups (Drake: ``num_discrete_state_groups``)."""
        return len(self._discrete_index())

    def get_discrete_state(self, index: int | None = None) -> Any:
        """All groups as DiscreteValues (``index=None``) or one group's vector (Drake: ``get_discrete_state``)."""
        leaves = self._leaf_contexts()
        idx = self._discrete_index()
        if index is None:
            groups = tuple(leaves[i].state.discrete_state.groups[g] for i, g in idx)
            return DiscreteValues(groups, self.system_id)
        if not 0 <= index < len(idx):
            raise StateError(
                f"Discrete state group {index} requested of System "
                f"{describe_system_id(self.system_id)}, which has {len(idx)} group(s)."
            )
        i, g = idx[index]
        return leaves[i].state.discrete_state.groups[g]

    def get_discrete_state_vector(self) -> Array:
        """Group 0 (Drake: ``get_discrete_state_vector``); an error unless there is exactly one group."""
        n = self.num_discrete_state_groups()
        if n != 1:
            raise StateError(
                f"get_discrete_state_vector() needs exactly one discrete state group; System "
                f"{describe_system_id(self.system_id)} has {n}. Use get_discrete_state(index)."
            )
        return self.get_discrete_state(0)

    def with_discrete_state(self, index: Any, value: Any = None) -> Context:
        """A copy with group ``index`` set to ``value``, or all groups from a DiscreteValues.

        Drake: ``SetDiscreteState``.
        """
        leaves = list(self._leaf_contexts())
        idx = self._discrete_index()
        if isinstance(index, DiscreteValues):
            if index.num_groups() != len(idx):
                raise StateError(
                    f"System {describe_system_id(self.system_id)} has {len(idx)} discrete state "
                    f"group(s); the DiscreteValues given has {index.num_groups()}."
                )
            ctx: Context = self
            for k, v in enumerate(index.groups):
                ctx = ctx.with_discrete_state(k, v)
            return ctx
        if not 0 <= index < len(idx):
            raise StateError(
                f"Discrete state group {index} set on System {describe_system_id(self.system_id)}, "
                f"which has {len(idx)} group(s)."
            )
        i, g = idx[index]
        leaf = leaves[i]
        dv = leaf.state.discrete_state
        new = _check_vector(leaf.system_id, f"Discrete state group {g}", dv.groups[g], value)
        leaves[i] = leaf._replace_state(
            discrete_state=DiscreteValues(dv.groups[:g] + (new,) + dv.groups[g + 1 :], dv.system_id)
        )
        return self._with_leaf_contexts(leaves)

    # --- abstract state ----------------------------------------------------------------------
    def _abstract_index(self) -> list[tuple[int, int]]:
        out = []
        for i, leaf in enumerate(self._leaf_contexts()):
            out.extend((i, k) for k in range(leaf.state.abstract_state.size()))
        return out

    def num_abstract_states(self) -> int:
        """Number of abstract state values (Drake: ``num_abstract_states``)."""
        return len(self._abstract_index())

    def get_abstract_state(self, index: int | None = None) -> Any:
        """All abstract values (``index=None``) or value ``index`` (Drake: ``get_abstract_state``)."""
        leaves = self._leaf_contexts()
        idx = self._abstract_index()
        if index is None:
            return AbstractValues(tuple(leaves[i].state.abstract_state.values[k] for i, k in idx), self.system_id)
        if not 0 <= index < len(idx):
            raise StateError(
                f"Abstract state {index} requested of System {describe_system_id(self.system_id)}, "
                f"which has {len(idx)}."
            )
        i, k = idx[index]
        return leaves[i].state.abstract_state.values[k]

    def with_abstract_state(self, index: int, value: Any) -> Context:
        """A copy with abstract state ``index`` replaced (same pytree structure; Drake: ``SetAbstractState``)."""
        leaves = list(self._leaf_contexts())
        idx = self._abstract_index()
        if not 0 <= index < len(idx):
            raise StateError(
                f"Abstract state {index} set on System {describe_system_id(self.system_id)}, which has {len(idx)}."
            )
        i, k = idx[index]
        leaves[i] = leaves[i]._replace_state(abstract_state=leaves[i].state.abstract_state.with_value(k, value))
        return self._with_leaf_contexts(leaves)

    # --- whole state -------------------------------------------------------------------------
    def get_state(self) -> State:
        """The whole state, flattened over leaves in Drake's order (Drake: ``get_state``)."""
        return State(
            self.get_continuous_state(),
            self.get_discrete_state(),
            self.get_abstract_state(),
            self.system_id,
        )

    def with_state(self, state: State) -> Context:
        """A copy holding ``state`` (same structure; Drake: ``SetStateAndParametersFrom`` for state)."""
        ctx = self.with_continuous_state(state.continuous_state.x)
        ctx = ctx.with_discrete_state(state.discrete_state)
        for k, v in enumerate(state.abstract_state.values):
            ctx = ctx.with_abstract_state(k, v)
        return ctx

    def is_stateless(self) -> bool:
        """True if there is no state at all (Drake: ``is_stateless``)."""
        return (
            self.num_continuous_states() == 0
            and self.num_discrete_state_groups() == 0
            and self.num_abstract_states() == 0
        )

    def has_only_continuous_state(self) -> bool:
        """Drake: ``has_only_continuous_state``."""
        return (
            self.num_continuous_states() > 0
            and self.num_discrete_state_groups() == 0
            and self.num_abstract_states() == 0
        )

    def has_only_discrete_state(self) -> bool:
        """Drake: ``has_only_discrete_state``."""
        return (
            self.num_discrete_state_groups() > 0
            and self.num_continuous_states() == 0
            and self.num_abstract_states() == 0
        )

    # --- parameters --------------------------------------------------------------------------
    def _numeric_index(self) -> list[tuple[int, int]]:
        out = []
        for i, leaf in enumerate(self._leaf_contexts()):
            out.extend((i, k) for k in range(len(leaf.parameters.numeric)))
        return out

    def _abstract_param_index(self) -> list[tuple[int, int]]:
        out = []
        for i, leaf in enumerate(self._leaf_contexts()):
            out.extend((i, k) for k in range(len(leaf.parameters.abstract)))
        return out

    def num_numeric_parameter_groups(self) -> int:
        """Drake: ``num_numeric_parameter_groups``."""
        return len(self._numeric_index())

    def num_abstract_parameters(self) -> int:
        """Drake: ``num_abstract_parameters``."""
        return len(self._abstract_param_index())

    def get_parameters(self) -> Parameters:
        """All parameters, flattened over leaves (Drake: ``get_parameters``)."""
        leaves = self._leaf_contexts()
        return Parameters(
            tuple(leaves[i].parameters.numeric[k] for i, k in self._numeric_index()),
            tuple(leaves[i].parameters.abstract[k] for i, k in self._abstract_param_index()),
            self.system_id,
        )

    def get_numeric_parameter(self, index: int) -> Array:
        """Numeric parameter group ``index`` (Drake: ``get_numeric_parameter``)."""
        idx = self._numeric_index()
        if not 0 <= index < len(idx):
            raise StateError(
                f"Numeric parameter {index} requested of System "
                f"{describe_system_id(self.system_id)}, which has {len(idx)}."
            )
        i, k = idx[index]
        return self._leaf_contexts()[i].parameters.numeric[k]

    def get_abstract_parameter(self, index: int) -> Any:
        """Abstract parameter ``index`` (Drake: ``get_abstract_parameter``)."""
        idx = self._abstract_param_index()
        if not 0 <= index < len(idx):
            raise StateError(
                f"Abstract parameter {index} requested of System "
                f"{describe_system_id(self.system_id)}, which has {len(idx)}."
            )
        i, k = idx[index]
        return self._leaf_contexts()[i].parameters.abstract[k]

    def with_numeric_parameter(self, index: int, value: Any) -> Context:
        """A copy with numeric parameter ``index`` set (same size; Drake: ``get_mutable_numeric_parameter``)."""
        leaves = list(self._leaf_contexts())
        idx = self._numeric_index()
        if not 0 <= index < len(idx):
            raise StateError(
                f"Numeric parameter {index} set on System {describe_system_id(self.system_id)}, which has {len(idx)}."
            )
        i, k = idx[index]
        p = leaves[i].parameters
        new = _check_vector(leaves[i].system_id, f"Numeric parameter {k}", p.numeric[k], value)
        leaves[i] = dataclasses.replace(
            leaves[i], parameters=Parameters(p.numeric[:k] + (new,) + p.numeric[k + 1 :], p.abstract, p.system_id)
        )
        return self._with_leaf_contexts(leaves)

    def with_abstract_parameter(self, index: int, value: Any) -> Context:
        """A copy with abstract parameter ``index`` replaced (same pytree structure)."""
        leaves = list(self._leaf_contexts())
        idx = self._abstract_param_index()
        if not 0 <= index < len(idx):
            raise StateError(
                f"Abstract parameter {index} set on System {describe_system_id(self.system_id)}, which has {len(idx)}."
            )
        i, k = idx[index]
        p = leaves[i].parameters
        _check_same_structure(leaves[i].system_id, f"Abstract parameter {k}", p.abstract[k], value)
        leaves[i] = dataclasses.replace(
            leaves[i], parameters=Parameters(p.numeric, p.abstract[:k] + (value,) + p.abstract[k + 1 :], p.system_id)
        )
        return self._with_leaf_contexts(leaves)

    def with_parameters(self, parameters: Parameters) -> Context:
        """A copy holding all of ``parameters`` (same structure)."""
        ctx: Context = self
        for k, v in enumerate(parameters.numeric):
            ctx = ctx.with_numeric_parameter(k, v)
        for k, v in enumerate(parameters.abstract):
            ctx = ctx.with_abstract_parameter(k, v)
        return ctx

    # --- inputs ------------------------------------------------------------------------------
    def num_input_ports(self) -> int:
        """Number of input ports of the system this context is for (Drake: ``num_input_ports``)."""
        return len(self.inputs)

    def get_fixed_input_value(self, index: int) -> Any:
        """The value fixed on input port ``index``, or None (Drake: ``MaybeGetFixedInputPortValue``)."""
        return self.inputs[index]

    # --- copying -----------------------------------------------------------------------------
    def clone(self) -> Context:
        """A copy with the same values and the same system ids (Drake: ``Clone``)."""
        return jax.tree_util.tree_map(lambda x: x, self)

    def astype(self, dtype: Any) -> Context:
        """A copy with every floating value converted to ``dtype``, with all system ids cleared.

        Mirrors Drake's scalar-converting ``SetFrom`` rule from "System Compatibility": converted data
        is no longer valid data for the original System, so it carries no id and every System
        method refuses it. To get a context of another dtype that a system accepts, use
        ``system.create_default_context(dtype=...)`` and :meth:`set_from`.
        """
        return _strip_ids(_cast_tree(self, dtype))

    def set_from(self, other: Context) -> Context:
        """A copy of ``self`` holding ``other``'s time, state and parameters, cast to ``self``'s dtypes.

        Ids and fixed input values stay ``self``'s (Drake: ``SetTimeStateAndParametersFrom``, the
        scalar-converting ``SetFrom``). ``other`` must have the same state and parameter layout.
        """
        mine = self._leaf_contexts()
        theirs = other._leaf_contexts()
        if len(mine) != len(theirs):
            raise StateError(
                f"set_from: the context of System {describe_system_id(other.system_id)} has "
                f"{len(theirs)} leaf context(s); this context of System "
                f"{describe_system_id(self.system_id)} has {len(mine)}."
            )
        new_leaves = []
        for a, b in zip(mine, theirs):
            a_vals, a_def = jax.tree_util.tree_flatten((a.state, a.parameters))
            b_vals, b_def = jax.tree_util.tree_flatten(_strip_ids((b.state, b.parameters)))
            if jax.tree_util.tree_structure(_strip_ids((a.state, a.parameters))) != b_def or any(
                np.shape(x) != np.shape(y) for x, y in zip(a_vals, b_vals)
            ):
                raise StateError(
                    f"set_from: the state/parameters of System {describe_system_id(b.system_id)} do "
                    f"not have the layout of those of System {describe_system_id(a.system_id)}."
                )
            vals = [jnp.asarray(y, dtype=jnp.asarray(x).dtype) for x, y in zip(a_vals, b_vals)]
            state, params = jax.tree_util.tree_unflatten(a_def, vals)
            new_leaves.append(
                LeafContext(jnp.asarray(b.time, dtype=a.time.dtype), state, params, a.inputs, a.system_id)
            )
        return self._with_leaf_contexts(new_leaves).with_time(jnp.asarray(other.time, dtype=self.time.dtype))


@_pytree_dataclass
class LeafContext(Context):
    """The context of a LeafSystem (Drake's ``LeafContext``).

    **Fields:**
    - `time`: scalar array, seconds.
    - `state`: :class:`State`.
    - `parameters`: :class:`Parameters`.
    - `inputs`: one entry per input port: the fixed (or diagram-supplied) value, or ``None``.
    - `system_id`: id of the creating LeafSystem (static).
    """

    time: Array
    state: State
    parameters: Parameters
    inputs: tuple[Any, ...]
    system_id: int = _static(INVALID_SYSTEM_ID)

    def _leaf_contexts(self) -> list[LeafContext]:
        return [self]

    def _num_leaves(self) -> int:
        return 1

    def _leaf_context_at(self, li: int) -> LeafContext:
        return self

    def _with_leaf_contexts(self, leaves: Sequence[LeafContext]) -> Context:
        (leaf,) = leaves
        return leaf

    def _replace_state(self, **kw: Any) -> LeafContext:
        s = self.state
        new = State(
            kw.get("continuous_state", s.continuous_state),
            kw.get("discrete_state", s.discrete_state),
            kw.get("abstract_state", s.abstract_state),
            s.system_id,
        )
        return LeafContext(self.time, new, self.parameters, self.inputs, self.system_id)

    def _with_inputs(self, inputs: tuple[Any, ...]) -> LeafContext:
        return LeafContext(self.time, self.state, self.parameters, inputs, self.system_id)

    def with_time(self, t: Any) -> LeafContext:
        """A copy at time ``t`` (seconds; Drake: ``SetTime``)."""
        return LeafContext(
            jnp.asarray(t, dtype=self.time.dtype),
            self.state,
            self.parameters,
            self.inputs,
            self.system_id,
        )


class PackLayout:
    """Where each subcontext of a DiagramContext is stored (static pytree metadata).

    ``slots[i]`` is ``(-1, j)`` for the j-th loose subcontext or ``(p, m)`` for member m of pack p;
    ``members[p]`` lists ``(subsystem index, member system id)``. JAX hashes and compares this at
    every jitted call, so the hash is computed once and identical layouts compare by identity first.
    """

    __slots__ = ("slots", "members", "_hash")

    def __init__(self, slots: tuple[tuple[int, int], ...], members: tuple[tuple[tuple[int, int], ...], ...]):
        self.slots = slots
        self.members = members
        self._hash = hash((slots, members))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            type(other) is PackLayout
            and self._hash == other._hash
            and self.slots == other.slots
            and self.members == other.members
        )

    def __repr__(self) -> str:
        return f"PackLayout({len(self.slots)} subcontexts, packs of {[len(m) for m in self.members]})"

    def plan(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(i for i, _ in m) for m in self.members)

    def with_member_ids(self, ids: Any) -> PackLayout:
        """A copy with member ids replaced (``ids(p, m, old) -> new``)."""
        members = tuple(
            tuple((i, ids(p, m, sid)) for m, (i, sid) in enumerate(mm)) for p, mm in enumerate(self.members)
        )
        return PackLayout(self.slots, members)


def with_system_id(tree: Any, system_id: int) -> Any:
    """Rebuild every id-bearing object in ``tree`` with ``system_id`` (static, no computation)."""
    if is_id_bearer(tree):
        changes = {
            f.name: with_system_id(getattr(tree, f.name), system_id)
            for f in dataclasses.fields(tree)
            if f.name not in ("system_id", "layout")
        }
        return dataclasses.replace(tree, system_id=system_id, **changes)
    if isinstance(tree, tuple):
        return tuple(with_system_id(t, system_id) for t in tree)
    return tree


def _take_member(tree: Any, m: int) -> Any:
    return jax.tree_util.tree_map(lambda a: a[m], tree)


def _pack_signature(leaf: LeafContext) -> Any:
    """Structure, shapes and dtypes of a leaf context (ids ignored), or None if it cannot be stacked."""
    vals, treedef = jax.tree_util.tree_flatten(with_system_id(leaf, INVALID_SYSTEM_ID))
    out = []
    for v in vals:
        if not isinstance(v, (jax.Array, np.ndarray)):
            return None
        out.append((tuple(v.shape), str(v.dtype)))
    return (treedef, tuple(out))


@_pytree_dataclass
class DiagramContext(Context):
    """The context of a Diagram: one subcontext per subsystem (Drake's ``DiagramContext``).

    **Fields:**
    - `time`: scalar array, seconds (kept equal to every subcontext's time).
    - `loose`: the subcontexts stored one by one, in subsystem order.
    - `packs`: contexts of identical leaf subsystems (a chain of 300 lags, a bank of filters) stored
      stacked along a leading axis: a diagram of N copies holds a few arrays, not N times as many
      (JAX's per-array cost at every ``jit`` call grows with the number of arrays).
    - `inputs`: values fixed on the diagram's own (exported) input ports, or ``None``.
    - `system_id`: id of the Diagram (static).
    - `layout`: a :class:`PackLayout`: where each subcontext is stored (static).

    The storage is invisible to users: :attr:`subcontexts` and every accessor return ordinary
    per-subsystem contexts.
    """

    time: Array
    loose: tuple[Context, ...]
    packs: tuple[LeafContext, ...]
    inputs: tuple[Any, ...]
    system_id: int = _static(INVALID_SYSTEM_ID)
    layout: PackLayout = _static(PackLayout((), ()))

    @staticmethod
    def make(
        time: Any,
        subcontexts: Sequence[Context],
        inputs: tuple[Any, ...],
        system_id: int,
        plan: Sequence[Sequence[int]] = (),
    ) -> DiagramContext:
        """Build a DiagramContext from its subcontexts, stacking those of each ``plan`` entry (indices
        of identical leaf subsystems) whose contexts have the same structure, shapes and dtypes."""
        subs = list(subcontexts)
        slot: dict[int, tuple[int, int]] = {}
        packs: list[LeafContext] = []
        members_all: list[tuple[tuple[int, int], ...]] = []
        for idxs in plan:
            by_sig: dict[Any, list[int]] = {}
            for i in idxs:
                sub = subs[i]
                if isinstance(sub, LeafContext):
                    sig = _pack_signature(sub)
                    if sig is not None:
                        by_sig.setdefault(sig, []).append(i)
            for members in by_sig.values():
                if len(members) < 2:
                    continue
                first = subs[members[0]].system_id
                p = len(packs)
                packs.append(
                    jax.tree_util.tree_map(
                        lambda *xs: jnp.stack(xs), *[with_system_id(subs[i], first) for i in members]
                    )
                )
                members_all.append(tuple((i, subs[i].system_id) for i in members))
                for m, i in enumerate(members):
                    slot[i] = (p, m)
        loose = []
        slots = []
        for i, sub in enumerate(subs):
            if i in slot:
                slots.append(slot[i])
            else:
                slots.append((-1, len(loose)))
                loose.append(sub)
        layout = PackLayout(tuple(slots), tuple(members_all))
        return DiagramContext(time, tuple(loose), tuple(packs), inputs, system_id, layout)

    @property
    def packing(self) -> tuple[tuple[tuple[int, int], ...], ...]:
        """For each pack: ``(subsystem index, member system id)`` of its members."""
        return self.layout.members

    def _subcontext(self, i: int) -> Context:
        """Subcontext ``i`` (a slice of its pack if it is packed)."""
        p, m = self.layout.slots[i]
        if p < 0:
            return self.loose[m]
        return with_system_id(_take_member(self.packs[p], m), self.layout.members[p][m][1])

    @property
    def subcontexts(self) -> tuple[Context, ...]:
        """One context per subsystem, in the order they were added."""
        return tuple(self._subcontext(i) for i in range(len(self.layout.slots)))

    def with_subcontext(self, i: int, sub: Context) -> DiagramContext:
        """A copy with subcontext ``i`` replaced (no checks; see ``Diagram.set_subsystem_context``)."""
        p, m = self.layout.slots[i]
        if p < 0:
            loose = self.loose[:m] + (sub,) + self.loose[m + 1 :]
            return dataclasses.replace(self, loose=loose)
        pack = self.packs[p]
        if _pack_signature(sub) == _pack_signature(_take_member(pack, m)):
            first = self.layout.members[p][0][1]
            new = jax.tree_util.tree_map(lambda a, v: a.at[m].set(v), pack, with_system_id(sub, first))
            layout = self.layout
            if sub.system_id != layout.members[p][m][1]:
                layout = layout.with_member_ids(lambda q, k, sid: sub.system_id if (q, k) == (p, m) else sid)
            packs = self.packs[:p] + (new,) + self.packs[p + 1 :]
            return dataclasses.replace(self, packs=packs, layout=layout)
        subs = list(self.subcontexts)
        subs[i] = sub
        return DiagramContext.make(self.time, subs, self.inputs, self.system_id, self.layout.plan())

    def _num_leaves(self) -> int:
        return sum(len(m) for m in self.layout.members) + sum(s._num_leaves() for s in self.loose)

    def _leaf_contexts(self) -> list[LeafContext]:
        out: list[LeafContext] = []
        for sub in self.subcontexts:
            out.extend(sub._leaf_contexts())
        return out

    def _leaf_context_at(self, li: int) -> LeafContext:
        for i, (p, m) in enumerate(self.layout.slots):
            n = 1 if p >= 0 else self.loose[m]._num_leaves()
            if li < n:
                return self._subcontext(i)._leaf_context_at(li)
            li -= n
        raise IndexError(li)

    def _with_leaf_contexts(self, leaves: Sequence[LeafContext]) -> DiagramContext:
        leaves = list(leaves)
        subs = []
        pos = 0
        for p, m in self.layout.slots:
            if p >= 0:
                subs.append(leaves[pos])
                pos += 1
            else:
                n = self.loose[m]._num_leaves()
                subs.append(self.loose[m]._with_leaf_contexts(leaves[pos : pos + n]))
                pos += n
        return DiagramContext.make(self.time, subs, self.inputs, self.system_id, self.layout.plan())

    def num_subcontexts(self) -> int:
        """Number of subsystem contexts."""
        return len(self.layout.slots)

    def with_time(self, t: Any) -> DiagramContext:
        """A copy at time ``t`` in this context and every subcontext (Drake: ``SetTime``)."""
        t = jnp.asarray(t, dtype=self.time.dtype)
        loose = tuple(s.with_time(t) for s in self.loose)
        packs = tuple(
            dataclasses.replace(p, time=jnp.broadcast_to(t, (len(m),))) for p, m in zip(self.packs, self.layout.members)
        )
        return DiagramContext(t, loose, packs, self.inputs, self.system_id, self.layout)

    # --- continuous state in storage blocks (a loose leaf, or a whole pack) -----------------------
    def _cont_blocks(self, first_leaf: int = 0) -> tuple[list[tuple[Array, list[int], tuple[int, int, int]]], int]:
        """Blocks of continuous state in storage order (loose subcontexts, then packs): (x of shape
        (members, n), leaf positions of the members, (num_q, num_v, num_z) per member); and the
        position after the last leaf."""
        blocks: list[tuple[Array, list[int], tuple[int, int, int]]] = []
        pack_pos: dict[int, list[int]] = {}
        li = first_leaf
        for p, m in self.layout.slots:
            if p >= 0:
                pack_pos.setdefault(p, []).append(li)
                li += 1
                continue
            sub = self.loose[m]
            if isinstance(sub, DiagramContext):
                inner, li = sub._cont_blocks(li)
                blocks.extend(inner)
            else:
                cs = sub.state.continuous_state
                blocks.append((cs.x[None], [li], (cs.num_q, cs.num_v, cs.num_z)))
                li += 1
        for p, pack in enumerate(self.packs):
            cs = pack.state.continuous_state
            blocks.append((cs.x, pack_pos[p], (cs.num_q, cs.num_v, cs.num_z)))
        return blocks, li

    def num_continuous_states(self) -> int:
        """Total number of continuous states (Drake: ``num_continuous_states``)."""
        return sum(int(np.prod(np.shape(x))) for x, _, _ in self._cont_blocks()[0])

    def get_continuous_state(self) -> ContinuousState:
        """The continuous state, Drake's [q, v, z] ordering (Drake: ``get_continuous_state``)."""
        blocks, _ = self._cont_blocks()
        perm, nq, nv, nz = _cont_layout(blocks)
        pieces = [x.reshape(-1) for x, _, _ in blocks if np.size(x)]
        if not pieces:
            x = jnp.zeros((0,), self.time.dtype)
        else:
            x = pieces[0] if len(pieces) == 1 else jnp.concatenate(pieces)
            if not np.array_equal(perm, np.arange(perm.size)):
                x = x[perm]
        return ContinuousState(x, nq, nv, nz, self.system_id)

    def with_continuous_state(self, x: Any) -> DiagramContext:
        """A copy with continuous state ``x`` (a vector or ContinuousState; Drake: ``SetContinuousState``)."""
        if isinstance(x, ContinuousState):
            x = x.x
        blocks, _ = self._cont_blocks()
        perm, nq, nv, nz = _cont_layout(blocks)
        n = perm.size
        shape = tuple(getattr(x, "shape", np.shape(x)))
        if shape != (n,):
            raise StateError(
                f"The continuous state of System {describe_system_id(self.system_id)} has size {n} "
                f"(num_q={nq}, num_v={nv}, num_z={nz}); the value given has shape {shape}."
            )
        x = jnp.asarray(x)
        if not np.array_equal(perm, np.arange(n)):
            x = x[np.argsort(perm)]
        xs, off = [], 0
        for xb, _, _ in blocks:
            k = int(np.size(xb))
            xs.append(x[off : off + k].reshape(np.shape(xb)) if k else xb)
            off += k
        return self._with_cont_blocks(xs)

    def _with_cont_blocks(self, xs: list[Array]) -> DiagramContext:
        """Inverse of :meth:`_cont_blocks`: new x per block, same order; consumes ``xs``."""
        loose: list[Context] = []
        for sub in self.loose:
            if isinstance(sub, DiagramContext):
                loose.append(sub._with_cont_blocks(xs))
            else:
                x = xs.pop(0)
                cs = sub.state.continuous_state
                loose.append(sub._replace_state(continuous_state=dataclasses.replace(cs, x=x[0].astype(cs.x.dtype))))
        packs = []
        for pack in self.packs:
            x = xs.pop(0)
            cs = pack.state.continuous_state
            packs.append(pack._replace_state(continuous_state=dataclasses.replace(cs, x=x.astype(cs.x.dtype))))
        return DiagramContext(self.time, tuple(loose), tuple(packs), self.inputs, self.system_id, self.layout)


def _cont_layout(blocks: list[tuple[Array, list[int], tuple[int, int, int]]]) -> tuple[np.ndarray, int, int, int]:
    """Static permutation from storage order (blocks flattened) to Drake's [q..., v..., z...] order."""
    per_leaf: dict[int, tuple[int, tuple[int, int, int]]] = {}
    off = 0
    for x, leaves, sizes in blocks:
        n = int(np.shape(x)[1]) if np.ndim(x) == 2 else 0
        for m, li in enumerate(leaves):
            per_leaf[li] = (off + m * n, sizes)
        off += len(leaves) * n
    order = sorted(per_leaf)
    perm: list[int] = []
    for part in range(3):
        for li in order:
            start, (nq, nv, nz) = per_leaf[li]
            lo = (0, nq, nq + nv)[part]
            size = (nq, nv, nz)[part]
            perm.extend(range(start + lo, start + lo + size))
    nq = sum(per_leaf[li][1][0] for li in order)
    nv = sum(per_leaf[li][1][1] for li in order)
    nz = sum(per_leaf[li][1][2] for li in order)
    return np.asarray(perm, dtype=np.int64), nq, nv, nz


def ravel_context(context: Context) -> tuple[Array, Any]:
    """The floating-point values of ``context`` as one vector, and a function rebuilding the context.

    ``vector, unravel = ravel_context(ctx)``; ``unravel(vector) == ctx``. Passing one vector into a
    jitted function instead of a context with thousands of arrays (a large diagram) removes JAX's
    per-array dispatch cost; non-floating leaves (integers, PRNG keys) are kept as they are.
    """
    leaves, treedef = jax.tree_util.tree_flatten(context)
    is_float = [jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating) for x in leaves]
    floats = [jnp.asarray(x) for x, f in zip(leaves, is_float) if f]
    shapes = [x.shape for x in floats]
    dtypes = [x.dtype for x in floats]
    sizes = [int(np.prod(s)) for s in shapes]
    vector = jnp.concatenate([x.reshape(-1) for x in floats]) if floats else jnp.zeros((0,), default_float_dtype())

    def unravel(v: Array) -> Context:
        out, pos, k = [], 0, 0
        for x, f in zip(leaves, is_float):
            if f:
                out.append(v[pos : pos + sizes[k]].reshape(shapes[k]).astype(dtypes[k]))
                pos += sizes[k]
                k += 1
            else:
                out.append(x)
        return jax.tree_util.tree_unflatten(treedef, out)

    return vector, unravel
