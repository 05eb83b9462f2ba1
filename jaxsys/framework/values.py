"""State and parameter values: the immutable pytrees a Context holds (Drake's ``ContinuousState``,
``DiscreteValues``, ``AbstractValues``, ``State``, ``Parameters``, ``SystemOutput``).

Each is a frozen dataclass registered as a pytree whose structure (sizes, the owning system's id) is
static and whose values are leaves; setters return new objects. Also the dtype helpers and the
system-id rewriting (`with_system_id`) that contexts share.

Imports: `errors` and `ids` only.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .errors import StateError
from .ids import INVALID_SYSTEM_ID, describe_system_id, same_structure


if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # (Python 3.10: typing_extensions comes with equinox)
    from typing_extensions import dataclass_transform


Array = jax.Array


def _static(default: Any) -> Any:
    """A dataclass field that is structure (part of the pytree definition), not data."""
    return dataclasses.field(default=default, metadata={"static": True})


@dataclass_transform(frozen_default=True, eq_default=False)
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


def refuse_complex(value: Any, what: str, owner_id: int) -> None:
    """A named error for a complex value given where jaxsys stores real numbers (state, parameters,
    time): a cast would drop the imaginary part silently."""
    if jnp.iscomplexobj(value):
        raise StateError(
            f"{what} of System {describe_system_id(owner_id)} holds real numbers; the value given is complex "
            f"({jnp.result_type(value)}). Casting would drop its imaginary part: declare the real and imaginary "
            f"parts as separate state (or use jnp.real / jnp.imag explicitly)."
        )


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
    refuse_complex(new, what, owner_id)
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
    if not same_structure(old_def, new_def):
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

    def with_continuous_state(self, x: Any) -> State:
        """A copy with continuous state ``x``: a vector of the same size, or a ContinuousState
        (Drake: ``get_mutable_continuous_state().SetFromVector(x)``). Handlers that return a State
        (unrestricted updates) build theirs with this and the two methods below."""
        if isinstance(x, ContinuousState):
            x = x.x
        return dataclasses.replace(self, continuous_state=self.continuous_state.with_vector(x))

    def with_discrete_state(self, index: Any, value: Any = None) -> State:
        """A copy with discrete group ``index`` set to ``value`` (same size), or with every group from
        a DiscreteValues given as ``index`` (Drake: ``get_mutable_discrete_state(index).SetFromVector``)."""
        if isinstance(index, DiscreteValues):
            if index.num_groups() != self.discrete_state.num_groups():
                raise StateError(
                    f"System {describe_system_id(self.system_id)} has {self.discrete_state.num_groups()} "
                    f"discrete state group(s); the DiscreteValues given has {index.num_groups()}."
                )
            dv = self.discrete_state
            for k, v in enumerate(index.groups):
                dv = dv.with_vector(k, v)
            return dataclasses.replace(self, discrete_state=dv)
        return dataclasses.replace(self, discrete_state=self.discrete_state.with_vector(index, value))

    def with_abstract_state(self, index: int, value: Any) -> State:
        """A copy with abstract state ``index`` replaced (same pytree structure and shapes;
        Drake: ``get_mutable_abstract_state<T>(index) = value``)."""
        return dataclasses.replace(self, abstract_state=self.abstract_state.with_value(index, value))


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
