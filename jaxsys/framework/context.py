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

This module holds the abstract [`Context`][jaxsys.Context] and the [`LeafContext`][jaxsys.LeafContext]; the value
classes are
in `values` and the [`DiagramContext`][jaxsys.DiagramContext] (with its packed storage) in
`diagram_context`. All are re-exported here.

Imports: `values`, `errors`, `ids` (and, at the end, re-exports
`diagram_context`, which builds on this module).
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from .drake_names import drake_name_error
from .errors import StateError
from .ids import INVALID_SYSTEM_ID, describe_system_id, same_structure
from .values import (
    AbstractValues as AbstractValues,
    ContinuousState as ContinuousState,
    DiscreteValues as DiscreteValues,
    Parameters as Parameters,
    State as State,
    SystemOutput as SystemOutput,
    _cast_tree,
    _check_same_structure,
    _check_vector,
    _pytree_dataclass,
    _static,
    as_float_array as as_float_array,
    default_float_dtype as default_float_dtype,
    is_id_bearer as is_id_bearer,
    refuse_complex,
    with_system_id as with_system_id,
)


Array = jax.Array


def _strip_ids(tree: Any) -> Any:
    """Rebuild every id-bearing module in ``tree`` with ``system_id = INVALID_SYSTEM_ID``."""
    if is_id_bearer(tree):
        changes = {
            f.name: _strip_ids(getattr(tree, f.name))
            for f in dataclasses.fields(tree)
            if f.name not in ("system_id", "layout")
        }
        if isinstance(getattr(tree, "layout", None), PackLayout):  # (defined in .diagram_context)
            changes["layout"] = tree.layout.with_member_ids(lambda p, m, sid: INVALID_SYSTEM_ID)
        return dataclasses.replace(tree, system_id=INVALID_SYSTEM_ID, **changes)
    if isinstance(tree, tuple):
        return tuple(_strip_ids(t) for t in tree)
    return tree


class Context(abc.ABC):
    """Abstract base of [`LeafContext`][jaxsys.LeafContext] and [`DiagramContext`][jaxsys.DiagramContext] (Drake's
    ``Context``).

    A Context holds time, state, parameters and fixed input values. It is immutable: ``with_*``
    methods return a new context. Contexts are created by ``system.create_default_context()``
    and carry the creating system's id; every System method checks it.
    """

    def __getattr__(self, name: str) -> Any:
        # only reached when normal lookup fails: Drake's CamelCase names get an error naming ours
        raise drake_name_error(self, name)

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

    # --- accuracy ----------------------------------------------------------------------------
    def get_accuracy(self) -> float | None:
        """The requested accuracy, or None when unset (Drake: ``get_accuracy``)."""
        return self.accuracy

    def with_accuracy(self, accuracy: float | None) -> Context:
        """A copy with the requested accuracy (Drake: ``SetAccuracy``): a unitless number in (0, 1], or
        None to unset it.

        [`simulate`][jaxsys.simulate] uses it as Drake's Simulator does for witness isolation: crossings are
        isolated to a window of ``max(0.01 * accuracy * 1 s, working minimum step)`` instead of the
        step-relative ``step * 2**-witness_iterations``. It is structure (static), as in Drake a
        setting rather than a value: changing it recompiles a jitted simulation. Set it on the root
        context (the one passed to ``simulate``); subcontexts do not carry it.
        """
        if accuracy is not None:
            a = float(accuracy)
            if not (0.0 < a <= 1.0):
                raise StateError(
                    f"with_accuracy: the accuracy of the context of System {describe_system_id(self.system_id)} "
                    f"must be a number in (0, 1] or None; got {accuracy!r}."
                )
            accuracy = a
        return dataclasses.replace(cast(Any, self), accuracy=accuracy)

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
        refuse_complex(x, "The continuous state", self.system_id)
        cs = ContinuousState(jnp.asarray(x, dtype=c.x.dtype), c.num_q, c.num_v, c.num_z, c.system_id)
        return self._with_leaf_contexts([leaf._replace_state(continuous_state=cs)])

    # --- discrete state ----------------------------------------------------------------------
    def _discrete_index(self) -> list[tuple[int, int]]:
        out: list[Any] = []
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
        out: list[Any] = []
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
        out: list[Any] = []
        for i, leaf in enumerate(self._leaf_contexts()):
            out.extend((i, k) for k in range(len(leaf.parameters.numeric)))
        return out

    def _abstract_param_index(self) -> list[tuple[int, int]]:
        out: list[Any] = []
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
        ``system.create_default_context(dtype=...)`` and `set_from`.
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
            if not same_structure(jax.tree_util.tree_structure(_strip_ids((a.state, a.parameters))), b_def) or any(
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
    - `state`: [`State`][jaxsys.State].
    - `parameters`: [`Parameters`][jaxsys.Parameters].
    - `inputs`: one entry per input port: the fixed (or diagram-supplied) value, or ``None``.
    - `system_id`: id of the creating LeafSystem (static).
    - `accuracy`: the requested accuracy (static; see `Context.with_accuracy`), or None.
    """

    time: Array
    state: State
    parameters: Parameters
    inputs: tuple[Any, ...]
    system_id: int = _static(INVALID_SYSTEM_ID)
    accuracy: float | None = _static(None)

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
        return LeafContext(self.time, new, self.parameters, self.inputs, self.system_id, self.accuracy)

    def _with_inputs(self, inputs: tuple[Any, ...]) -> LeafContext:
        return LeafContext(self.time, self.state, self.parameters, inputs, self.system_id, self.accuracy)

    def with_time(self, t: Any) -> LeafContext:
        """A copy at time ``t`` (seconds; Drake: ``SetTime``)."""
        refuse_complex(t, "The time", self.system_id)
        return LeafContext(
            jnp.asarray(t, dtype=self.time.dtype),
            self.state,
            self.parameters,
            self.inputs,
            self.system_id,
            self.accuracy,
        )


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


from .diagram_context import DiagramContext as DiagramContext, PackLayout as PackLayout  # noqa: E402
