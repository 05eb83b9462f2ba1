"""Evaluating a built Diagram: its flattened structure (``_Flat``) and the per-call evaluator that
computes leaf inputs, outputs and time derivatives from a diagram context (``_Evaluator``), with
memoized outputs and the vectorised groups of identical leaves (see `vectorize`).

Imports (within jaxsys): ``context``, ``diagram``, ``errors``, ``leaf_system``, ``system``,
``vectorize``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .context import Context, DiagramContext, LeafContext, with_system_id
from .errors import AlgebraicLoopError, InputPortNotConnectedError, _Raise
from .leaf_system import _Lazy, _Unfed
from .system import System
from .vectorize import stack


if TYPE_CHECKING:
    from .diagram import Diagram

Path = tuple[int, ...]


@dataclasses.dataclass
class _Flat:
    leaf_paths: list[Path]
    leaf_index: dict[Path, int]
    input_source: dict[tuple[int, int], tuple[Any, ...]]
    output_source: list[tuple[str, int, int]]


def _member_builder(rep: System) -> Callable[[list[jax.Array]], System]:
    """A function rebuilding a group member from its array fields on ``rep``'s structure."""
    dyn, static = eqx.partition(rep, eqx.is_array)
    treedef = jax.tree_util.tree_structure(dyn)
    return lambda leaves: eqx.combine(jax.tree_util.tree_unflatten(treedef, leaves), static)


def _take(x: jax.Array, pos: np.ndarray) -> jax.Array:
    """``x[pos]`` along axis 0 for static integer positions of any shape.

    Contiguous runs become a slice and a reshape: XLA turns those into no-ops, while a gather with
    an index array that a loop carries (as happens under ``jit`` with a traced context) stays a
    slow generic gather.
    """
    pos = np.asarray(pos)
    flat = pos.reshape(-1)
    if flat.size and np.array_equal(flat, np.arange(flat[0], flat[0] + flat.size)):
        start = int(flat[0])
        return x[start : start + flat.size].reshape(pos.shape + x.shape[1:])
    return x[pos]


class _LeafContexts:
    """Indexable view: evaluator.leaf_contexts[li] -> that leaf's (possibly x-overridden) context."""

    def __init__(self, ev: _Evaluator) -> None:
        self.ev = ev

    def __getitem__(self, li: int) -> LeafContext:
        return self.ev.base_leaf_context(li)


def _packs_by_leaves(context: Context) -> dict[tuple[int, ...], LeafContext]:
    """The packs of ``context`` (and of nested diagram contexts), keyed by their members' leaf indices."""
    out: dict[tuple[int, ...], LeafContext] = {}

    def walk(ctx: Context, first: int) -> int:
        if not isinstance(ctx, DiagramContext):
            return first + 1
        members: dict[int, list[int]] = {}
        li = first
        for p, m in ctx.layout.slots:
            if p >= 0:
                members.setdefault(p, []).append(li)
                li += 1
            else:
                li = walk(ctx.loose[m], li)
        for p, pack in enumerate(ctx.packs):
            out[tuple(members[p])] = pack
        return li

    walk(context, 0)
    return out


class _Evaluator:
    """Memoized evaluation of leaf outputs of one Diagram at one context."""

    def __init__(
        self, diagram: Diagram, context: DiagramContext, x: jax.Array | None = None, prepared: Any = None
    ) -> None:
        self.diagram = diagram
        self.flat = diagram._flat()
        self.context = context
        self.x: Any = x  # when given: the continuous state (diagram ordering) overriding the context's
        self.prepared = prepared  # stacked group contexts computed before a loop (or None)
        self._leaf_ctx_cache: dict[int, LeafContext] = {}
        self._stored: dict[int, LeafContext] = {}  # leaf contexts as stored, taken when first needed
        self._pieces: Any = None  # x cut into the leaves' q, v, z blocks
        self.leaves = [diagram._system_at(p) for p in self.flat.leaf_paths]
        self.memo: dict[tuple[int, int], Any] = {}
        self.active: set[tuple[int, int]] = set()
        self.groups, self.group_of = diagram._groups()
        self.gmemo: dict[Any, Any] = {}

    @property
    def leaf_contexts(self) -> _LeafContexts:
        return _LeafContexts(self)

    def stored_leaf_context(self, li: int) -> LeafContext:
        """Leaf ``li``'s context as stored in the diagram context (a slice, if it is packed)."""
        if li not in self._stored:
            self._stored[li] = self.context._leaf_context_at(li)
        return self._stored[li]

    def base_leaf_context(self, li: int) -> LeafContext:
        """Leaf ``li``'s context (inputs as stored), with its continuous state taken from ``x``."""
        if self.x is None:
            return self.stored_leaf_context(li)
        if li not in self._leaf_ctx_cache:
            leaf_ctx = self.stored_leaf_context(li)
            pos = self.diagram._state_positions()[li]
            if pos.size:
                leaf_ctx = leaf_ctx._replace_state(
                    continuous_state=dataclasses.replace(
                        leaf_ctx.state.continuous_state,
                        x=self._leaf_state(li).astype(leaf_ctx.state.continuous_state.x.dtype),
                    )
                )
            self._leaf_ctx_cache[li] = leaf_ctx
        return self._leaf_ctx_cache[li]

    def _leaf_state(self, li: int) -> jax.Array:
        """Leaf ``li``'s continuous state [q, v, z] taken from ``x``.

        ``x`` is cut into every leaf's q, v and z blocks by one ``split`` (taken once per evaluator),
        not by a slice per leaf: the transpose of a slice is a pad of the whole vector, so reverse
        mode through N sliced leaves sums N padded vectors (O(N^2) work, and an XLA fusion pass
        whose time grows faster still), while the transpose of one split is one concatenate.
        """
        sizes, blocks = self.diagram._state_blocks()
        if self._pieces is None:
            self._pieces = jax.lax.split(self.x, sizes) if len(sizes) > 1 else [self.x]
        parts = [self._pieces[b] for b in blocks[li]]
        return parts[0] if len(parts) == 1 else jnp.concatenate(parts)

    def context_at(self, path: Path) -> Context:
        ctx: Context = self.context
        for i in path:
            ctx = ctx._subcontext(i)
        return ctx

    def source_value(self, src: tuple[Any, ...]) -> Any:
        if src[0] == "out":
            return self.output(src[1], src[2])
        _, path, k = src
        value = self.context_at(path).inputs[k]
        if isinstance(value, _Lazy):
            return value.get()
        if value is None:
            system = self.diagram._system_at(path)
            port = system.get_input_port(k)
            raise InputPortNotConnectedError(
                f"InputPort.eval(): required {port.get_full_description()} is neither connected nor "
                f"fixed. Connect it in a DiagramBuilder or give it a value with "
                f"port.fix_value(context, value)."
            )
        return value

    def input(self, li: int, k: int) -> Any:
        return self.source_value(self.flat.input_source[(li, k)])

    def output(self, li: int, p: int) -> Any:
        key = (li, p)
        if key in self.memo:
            return self.memo[key]
        leaf = self.leaves[li]
        if li in self.group_of and not leaf._feedthrough_inputs_of(p):
            g, m = self.group_of[li]
            value = jax.tree_util.tree_map(lambda a: a[m], self.group_output(g, p))
            self.memo[key] = value
            return value
        if key in self.active:
            raise AlgebraicLoopError(
                f"Algebraic loop met while evaluating {leaf.get_output_port(p).get_full_description()}: "
                f"its value depends on itself through ports declared as direct feedthrough."
            )
        self.active.add(key)
        try:
            ft = leaf._feedthrough_inputs_of(p)
            inputs = tuple(
                self._lazy(li, k) if k in ft else _Unfed(leaf.get_input_port(k), leaf.get_output_port(p))
                for k in range(leaf.num_input_ports())
            )
            ctx = self.leaf_contexts[li]._with_inputs(inputs)
            value = leaf._calc_output_raw(ctx, p)
        finally:
            self.active.discard(key)
        self.memo[key] = value
        return value

    # ----- vectorised groups of identical leaves (see vectorize.py) ------------------------------
    def stacked_group_contexts(self) -> dict[int, tuple[Any, Any]]:
        """For every group: (stacked array fields, stacked member contexts without inputs).

        Computed once before a simulation loop and passed back as ``prepared``: the loop then
        captures a few stacked arrays instead of every leaf's context.
        """
        out = {}
        packs = _packs_by_leaves(self.context)
        for g, members in enumerate(self.groups):
            rep = self.leaves[members[0]]
            sid = rep.get_system_id()
            n_in = rep.num_input_ports()
            pack = packs.get(tuple(members))
            if pack is not None:
                # the group's contexts are stored stacked already: no per-member slicing and stacking
                ctxs = with_system_id(pack._with_inputs((None,) * n_in), sid)
            else:
                ctxs = stack(
                    [with_system_id(self.stored_leaf_context(li)._with_inputs((None,) * n_in), sid) for li in members]
                )
            # array fields of the members (usually none): stacked leaves on the representative's structure
            dyn = [jax.tree_util.tree_leaves(eqx.filter(self.leaves[li], eqx.is_array)) for li in members]
            out[g] = ([jnp.stack(xs) for xs in zip(*dyn)], ctxs)
        return out

    def _group_parts(self, g: int) -> tuple[Any, Any, Any]:
        """(representative leaf, stacked array fields, stacked member contexts at this time and x)."""
        key = ("parts", g)
        if key not in self.gmemo:
            members = self.groups[g]
            rep = self.leaves[members[0]]
            if self.prepared is None:
                self.prepared = self.stacked_group_contexts()
            dyn, ctxs = self.prepared[g]
            time = jnp.broadcast_to(self.context.time, (len(members),))
            ctxs = dataclasses.replace(ctxs, time=time)
            if self.x is not None and rep._spec.num_q + rep._spec.num_v + rep._spec.num_z:
                # members' continuous states straight from x with one gather (no per-leaf slices)
                rows = np.stack([self.diagram._state_positions()[li] for li in members])
                cs = ctxs.state.continuous_state
                ctxs = dataclasses.replace(
                    ctxs,
                    state=dataclasses.replace(
                        ctxs.state, continuous_state=dataclasses.replace(cs, x=_take(self.x, rows).astype(cs.x.dtype))
                    ),
                )
            self.gmemo[key] = (rep, dyn, ctxs)
        return self.gmemo[key]

    def group_output(self, g: int, p: int) -> Any:
        """Output port ``p`` (no direct feedthrough) of every member of group ``g``, stacked."""
        key = ("out", g, p)
        if key not in self.gmemo:
            rep, dyn, ctxs = self._group_parts(g)
            member = _member_builder(rep)
            unfed = tuple(_Unfed(rep.get_input_port(k), rep.get_output_port(p)) for k in range(rep.num_input_ports()))

            def one(d: Any, c: LeafContext) -> Any:
                return member(d)._calc_output_raw(c._with_inputs(unfed), p)

            self.gmemo[key] = jax.vmap(one)(dyn, ctxs)
        return self.gmemo[key]

    def group_input(self, g: int, k: int) -> Any:
        """Input port ``k`` of every member of group ``g``, stacked, gathered from a bus of sources."""
        arrays: dict[Any, Any] = {}
        picks: list[tuple[Any, int]] = []
        for li in self.groups[g]:
            src = self.flat.input_source[(li, k)]
            if src[0] == "out" and src[1] in self.group_of and not self.leaves[src[1]]._feedthrough_inputs_of(src[2]):
                g2, m2 = self.group_of[src[1]]
                akey: tuple[Any, ...] = ("g", g2, src[2])
                if akey not in arrays:
                    arrays[akey] = self.group_output(g2, src[2])
                picks.append((akey, m2))
            else:
                akey = ("one", li)
                arrays[akey] = jax.tree_util.tree_map(lambda a: jnp.asarray(a)[None], self.source_value(src))
                picks.append((akey, 0))
        offsets, pos = {}, 0
        for akey, tree in arrays.items():
            offsets[akey] = pos
            pos += jax.tree_util.tree_leaves(tree)[0].shape[0] if jax.tree_util.tree_leaves(tree) else 1
        idx = np.array([offsets[a] + m for a, m in picks])
        if len(arrays) == 1:
            (tree,) = arrays.values()
            if np.array_equal(idx, np.arange(jax.tree_util.tree_leaves(tree)[0].shape[0])):
                return tree
        bus = jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *arrays.values())
        return jax.tree_util.tree_map(lambda b: _take(b, idx), bus)

    def group_derivatives(self, g: int) -> jax.Array:
        """xdot of every member of group ``g``, shape (members, states per member)."""
        rep, dyn, ctxs = self._group_parts(g)
        member = _member_builder(rep)
        inputs = []
        for k in range(rep.num_input_ports()):
            try:
                inputs.append(self.group_input(g, k))
            except InputPortNotConnectedError as e:
                inputs.append(_Raise(e))
        inputs_t = tuple(inputs)

        def one(d: Any, c: LeafContext, ins: tuple[Any, ...]) -> jax.Array:
            return member(d)._calc_time_derivatives_raw(c._with_inputs(ins))

        return jax.vmap(one)(dyn, ctxs, inputs_t)

    def _lazy(self, li: int, k: int) -> _Lazy:
        return _Lazy(lambda: self.input(li, k))

    def leaf_context(self, li: int) -> LeafContext:
        """Leaf ``li``'s context, every input supplied lazily."""
        leaf = self.leaves[li]
        inputs = tuple(self._lazy(li, k) for k in range(leaf.num_input_ports()))
        return self.leaf_contexts[li]._with_inputs(inputs)
