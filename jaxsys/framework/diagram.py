"""``Diagram``: a System made of subsystems wired together (Drake's ``Diagram<T>``).

A Diagram is built by a :class:`~jaxsys.DiagramBuilder`. It is itself a System, so diagrams nest.
Its context holds one subcontext per subsystem. At build time the whole tree of subsystems is
flattened once into its leaves, every leaf input is resolved to its source (a leaf output port, or a
value fixed on some context in the tree), direct feedthrough is composed, and algebraic loops are
detected. Evaluating an output or the time derivatives of a Diagram then walks only the leaves it
needs, each output computed once per evaluation (outputs are memoized for the duration of one
call; under ``jax.jit`` this is one traced computation).

Imports (within jaxsys): ``constraints``, ``context``, ``errors``, ``leaf_system``, ``ports``,
``system``, ``vectorize``.
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
from .errors import AlgebraicLoopError, InputPortNotConnectedError, JaxsysError, PortError
from .leaf_system import LeafSystem, _Lazy, _Raise, _Unfed
from .ports import InputPort, OutputPort
from .system import System
from .vectorize import find_groups, stack


if TYPE_CHECKING:
    from .constraints import SystemConstraint

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
        self.x = x  # when given: the continuous state (diagram ordering) overriding the context's
        self.prepared = prepared  # stacked group contexts computed before a loop (or None)
        self._leaf_ctx_cache: dict[int, LeafContext] = {}
        self._stored: dict[int, LeafContext] = {}  # leaf contexts as stored, taken when first needed
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
                        x=_take(self.x, pos).astype(leaf_ctx.state.continuous_state.x.dtype),
                    )
                )
            self._leaf_ctx_cache[li] = leaf_ctx
        return self._leaf_ctx_cache[li]

    def context_at(self, path: Path) -> Context:
        ctx: Context = self.context
        for i in path:
            ctx = ctx._subcontext(i)  # type: ignore[attr-defined]
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
                akey = ("g", g2, src[2])
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


class Diagram(System):
    """A System made of connected subsystems (Drake's ``Diagram``). Create it with a DiagramBuilder.

    **Fields:**
    - `subsystems`: the subsystems, in the order they were added (pytree children).
    """

    subsystems: tuple[System, ...]

    def __init__(self, blueprint: Any, name: str = "") -> None:
        super().__init__(name)
        self.subsystems = tuple(blueprint.systems)
        spec = self._spec
        spec.connections = dict(blueprint.connections)
        spec.input_targets = [list(t) for _, t in blueprint.exported_inputs]
        spec.output_sources = [src for _, src in blueprint.exported_outputs]
        spec.flat = None
        for k, (pname, targets) in enumerate(blueprint.exported_inputs):
            si, ii = targets[0]
            model = self.subsystems[si].get_input_port(ii)
            spec.input_ports.append(InputPort(self, k, pname, model.get_data_type(), model.size(), model.get_model()))
        for k, (pname, (so, oo)) in enumerate(blueprint.exported_outputs):
            model = self.subsystems[so].get_output_port(oo)
            spec.output_ports.append(OutputPort(self, k, pname, model.get_data_type(), model.size(), model.get_model()))

    # ===== structure ===========================================================================
    def get_systems(self) -> list[System]:
        """The subsystems, in the order added (Drake: ``GetSystems``)."""
        return list(self.subsystems)

    def num_subsystems(self) -> int:
        """Number of direct subsystems (Drake: ``num_subsystems``)."""
        return len(self.subsystems)

    def has_subsystem_named(self, name: str) -> bool:
        """Drake: ``HasSubsystemNamed``."""
        return any(s.get_name() == name for s in self.subsystems)

    def get_subsystem_by_name(self, name: str) -> System:
        """The direct subsystem named ``name`` (Drake: ``GetSubsystemByName``)."""
        for s in self.subsystems:
            if s.get_name() == name:
                return s
        raise JaxsysError(
            f"Diagram {self.get_path()} has no subsystem named {name!r}; its subsystems are "
            f"{[s.get_name() for s in self.subsystems]}."
        )

    def get_connection_map(self) -> dict[InputPort, OutputPort]:
        """input port -> the output port it is connected to (Drake: ``connection_map``)."""
        return {
            self.subsystems[si].get_input_port(ii): self.subsystems[so].get_output_port(oo)
            for (si, ii), (so, oo) in self._spec.connections.items()
        }

    def get_input_port_locators(self, port: InputPort) -> list[InputPort]:
        """The subsystem input ports a diagram input port feeds (Drake: ``GetInputPortLocators``)."""
        self._check_own_port(port)
        return [self.subsystems[si].get_input_port(ii) for si, ii in self._spec.input_targets[port.get_index()]]

    def get_output_port_locator(self, port: OutputPort) -> OutputPort:
        """The subsystem output port a diagram output port exports (Drake: ``get_output_port_locator``)."""
        self._check_own_port(port)
        so, oo = self._spec.output_sources[port.get_index()]
        return self.subsystems[so].get_output_port(oo)

    def _system_at(self, path: Path) -> System:
        s: System = self
        for i in path:
            s = s.subsystems[i]  # type: ignore[attr-defined]
        return s

    def _path_of(self, system: System) -> Path:
        def search(d: Diagram, prefix: Path) -> Path | None:
            for i, s in enumerate(d.subsystems):
                if s._spec is system._spec:
                    return prefix + (i,)
                if isinstance(s, Diagram):
                    found = search(s, prefix + (i,))
                    if found is not None:
                        return found
            return None

        if system._spec is self._spec:
            return ()
        found = search(self, ())
        if found is None:
            raise JaxsysError(
                f"System {system.get_system_id_string()} is not a subsystem of Diagram {self.get_system_id_string()}."
            )
        return found

    def _is_input_connected(self, system: System, index: int) -> bool:
        for i, s in enumerate(self.subsystems):
            if s._spec is system._spec:
                if (i, index) in self._spec.connections:
                    return True
                return any((i, index) in t for t in self._spec.input_targets)
        return False

    # ===== flattening ============================================================================
    def _flat(self) -> _Flat:
        if self._spec.flat is not None:
            return self._spec.flat
        leaf_paths: list[Path] = []

        def collect(d: Diagram, prefix: Path) -> None:
            for i, s in enumerate(d.subsystems):
                if isinstance(s, Diagram):
                    collect(s, prefix + (i,))
                else:
                    leaf_paths.append(prefix + (i,))

        collect(self, ())
        leaf_index = {p: i for i, p in enumerate(leaf_paths)}

        def resolve_out(dpath: Path, si: int, oo: int) -> tuple[str, int, int]:
            sys_path = dpath + (si,)
            s = self._system_at(sys_path)
            if isinstance(s, Diagram):
                s2, o2 = s._spec.output_sources[oo]
                return resolve_out(sys_path, s2, o2)
            return ("out", leaf_index[sys_path], oo)

        def resolve_in(sys_path: Path, k: int) -> tuple[Any, ...]:
            if not sys_path:
                return ("fixed", (), k)
            parent = self._system_at(sys_path[:-1])
            idx = sys_path[-1]
            conn = parent._spec.connections.get((idx, k))
            if conn is not None:
                return resolve_out(sys_path[:-1], *conn)
            for dk, targets in enumerate(parent._spec.input_targets):
                if (idx, k) in targets:
                    return resolve_in(sys_path[:-1], dk)
            return ("fixed", sys_path, k)

        input_source = {}
        for li, p in enumerate(leaf_paths):
            leaf = self._system_at(p)
            for k in range(leaf.num_input_ports()):
                input_source[(li, k)] = resolve_in(p, k)
        output_source = [resolve_out((), so, oo) for so, oo in self._spec.output_sources]
        self._spec.flat = _Flat(leaf_paths, leaf_index, input_source, output_source)
        self._spec.resolve_in = resolve_in
        return self._spec.flat

    # ===== System primitives =======================================================================
    def _allocate_context(self, dtype: Any) -> DiagramContext:
        return DiagramContext.make(
            jnp.zeros((), dtype),
            tuple(s._allocate_context(dtype) for s in self.subsystems),
            (None,) * self.num_input_ports(),
            self.get_system_id(),
            self._pack_plan(),
        )

    def _pack_plan(self) -> tuple[tuple[int, ...], ...]:
        """Indices of identical leaf subsystems whose contexts are stored stacked (cached)."""
        if getattr(self._spec, "pack_plan", None) is None:
            idx = [i for i, s in enumerate(self.subsystems) if isinstance(s, LeafSystem)]
            groups = find_groups([self.subsystems[i] for i in idx])
            self._spec.pack_plan = tuple(tuple(idx[j] for j in g) for g in groups)
        return self._spec.pack_plan

    def _eval_input_raw(self, context: Context, index: int) -> Any:
        value = context.inputs[index]
        if isinstance(value, _Lazy):
            return value.get()
        if isinstance(value, _Unfed):
            raise PortError(
                f"{value.output_port.get_full_description()} read {value.input_port.get_full_description()}, "
                f"but it was declared without direct feedthrough from that input."
            )
        if value is None:
            port = self._spec.input_ports[index]
            raise InputPortNotConnectedError(
                f"InputPort.eval(): required {port.get_full_description()} is neither connected nor "
                f"fixed. Connect it in a DiagramBuilder or give it a value with "
                f"port.fix_value(context, value)."
            )
        return value

    def _evaluator(self, context: Context, x: jax.Array | None = None) -> _Evaluator:
        return _Evaluator(self, context, x)  # type: ignore[arg-type]

    def _calc_output_raw(self, context: Context, index: int) -> Any:
        _, li, p = self._flat().output_source[index]
        return self._evaluator(context).output(li, p)

    def _state_positions(self) -> dict[int, np.ndarray]:
        """For each leaf: where its [q, v, z] elements sit in the diagram's continuous state vector."""
        if getattr(self._spec, "state_positions", None) is None:
            flat = self._flat()
            leaves = [self._system_at(p) for p in flat.leaf_paths]
            nq = sum(lf._spec.num_q for lf in leaves)
            nv = sum(lf._spec.num_v for lf in leaves)
            oq, ov, oz = 0, nq, nq + nv
            out = {}
            for li, lf in enumerate(leaves):
                q, v, z = lf._spec.num_q, lf._spec.num_v, lf._spec.num_z
                out[li] = np.concatenate([np.arange(oq, oq + q), np.arange(ov, ov + v), np.arange(oz, oz + z)]).astype(
                    np.int64
                )
                oq, ov, oz = oq + q, ov + v, oz + z
            self._spec.state_positions = out
        return self._spec.state_positions

    def _derivative_function(self, context: Context) -> Callable[[jax.Array, jax.Array], jax.Array]:
        prepared = self._evaluator(context).stacked_group_contexts()

        def f(t: jax.Array, x: jax.Array) -> jax.Array:
            return self._derivatives(_Evaluator(self, context.with_time(t), x, prepared))  # type: ignore[arg-type]

        return f

    def _groups(self) -> tuple[list[list[int]], dict[int, tuple[int, int]]]:
        """Groups of identical leaves evaluated with one vmap (cached), and leaf -> (group, member)."""
        if getattr(self._spec, "groups", None) is None:
            flat = self._flat()
            groups = find_groups([self._system_at(p) for p in flat.leaf_paths])
            group_of = {li: (g, m) for g, members in enumerate(groups) for m, li in enumerate(members)}
            self._spec.groups = (groups, group_of)
        return self._spec.groups

    def _continuous_leaves(self) -> list[int]:
        flat = self._flat()
        out = []
        for li, p in enumerate(flat.leaf_paths):
            s = self._system_at(p)
            if s._spec.num_q + s._spec.num_v + s._spec.num_z > 0:
                out.append(li)
        return out

    def _calc_time_derivatives_raw(self, context: Context) -> jax.Array:
        return self._derivatives(self._evaluator(context))

    def _derivatives(self, ev: _Evaluator) -> jax.Array:
        cont = self._continuous_leaves()
        if not cont:
            return jnp.zeros((0,), ev.context.time.dtype)
        # Every leaf's xdot goes into one flat vector (vectorised groups as whole blocks), then one
        # static permutation puts it in Drake's order: q of all leaves, v of all, z of all.
        blocks: list[jax.Array] = []
        where: dict[int, int] = {}  # leaf -> offset of its xdot in the flat vector
        pos = 0
        done_groups: set[int] = set()
        for li in cont:
            if li in ev.group_of:
                g, _ = ev.group_of[li]
                if g in done_groups:
                    continue
                done_groups.add(g)
                block = ev.group_derivatives(g)
                n = block.shape[1]
                for m, lj in enumerate(ev.groups[g]):
                    where[lj] = pos + m * n
                blocks.append(block.reshape(-1))
                pos += block.shape[0] * n
            else:
                xdot = ev.leaves[li]._calc_time_derivatives_raw(ev.leaf_context(li))
                where[li] = pos
                blocks.append(xdot)
                pos += xdot.shape[0]
        flat = blocks[0] if len(blocks) == 1 else jnp.concatenate(blocks)
        perm: list[int] = []
        for part in ("q", "v", "z"):
            for li in cont:
                spec = ev.leaves[li]._spec
                start = {"q": 0, "v": spec.num_q, "z": spec.num_q + spec.num_v}[part]
                size = {"q": spec.num_q, "v": spec.num_v, "z": spec.num_z}[part]
                perm.extend(range(where[li] + start, where[li] + start + size))
        if perm == list(range(len(perm))):
            return flat
        return _take(flat, np.asarray(perm))

    def _calc_energy_raw(self, context: Context, which: str) -> jax.Array:
        ev = self._evaluator(context)
        total = jnp.zeros((), context.time.dtype)
        for li, leaf in enumerate(ev.leaves):
            total = total + leaf._calc_energy_raw(ev.leaf_context(li), which)
        return total

    def _map_raw(self, context: Context, vector: jax.Array, which: str) -> jax.Array:
        ev = self._evaluator(context)
        out, pos = [], 0
        for li in self._continuous_leaves():
            leaf = ev.leaves[li]
            n_in = leaf._spec.num_v if which == "v_to_qdot" else leaf._spec.num_q
            piece = vector[pos : pos + n_in]
            pos += n_in
            out.append(leaf._map_raw(ev.leaf_context(li), piece, which))
        if not out:
            return jnp.zeros((0,), vector.dtype)
        return jnp.concatenate(out)

    # ===== feedthrough and algebraic loops ========================================================
    def _leaf_graph(self) -> dict[tuple[Any, ...], list[tuple[Any, ...]]]:
        """Edges between port nodes: ('in', li, k) / ('out', li, p) / ('din', k)."""
        flat = self._flat()
        edges: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
        for (li, k), src in flat.input_source.items():
            if src[0] == "out":
                edges.setdefault(("out", src[1], src[2]), []).append(("in", li, k))
            elif src[1] == ():
                edges.setdefault(("din", src[2]), []).append(("in", li, k))
        for li, p in enumerate(flat.leaf_paths):
            leaf = self._system_at(p)
            for i, o in sorted(leaf.get_direct_feedthroughs()):
                edges.setdefault(("in", li, i), []).append(("out", li, o))
        return edges

    def _compute_direct_feedthroughs(self) -> frozenset[tuple[int, int]]:
        flat = self._flat()
        edges = self._leaf_graph()
        pairs = set()
        for k in range(self.num_input_ports()):
            seen = set()
            stack = [("din", k)]
            while stack:
                node = stack.pop()
                for nxt in edges.get(node, []):
                    if nxt not in seen:
                        seen.add(nxt)
                        stack.append(nxt)
            for j, src in enumerate(flat.output_source):
                if src in seen:
                    pairs.add((k, j))
        return frozenset(pairs)

    def _find_algebraic_loop(self) -> list[tuple[Any, ...]] | None:
        edges = self._leaf_graph()
        white, grey, black = 0, 1, 2
        color: dict[tuple[Any, ...], int] = {}
        stack_path: list[tuple[Any, ...]] = []

        def dfs(node: tuple[Any, ...]) -> list[tuple[Any, ...]] | None:
            color[node] = grey
            stack_path.append(node)
            for nxt in edges.get(node, []):
                c = color.get(nxt, white)
                if c == grey:
                    return stack_path[stack_path.index(nxt) :] + [nxt]
                if c == white:
                    found = dfs(nxt)
                    if found is not None:
                        return found
            stack_path.pop()
            color[node] = black
            return None

        for node in sorted(edges, key=repr):
            if color.get(node, white) == white:
                found = dfs(node)
                if found is not None:
                    return found
        return None

    def _check_algebraic_loops(self) -> None:
        import sys as _sys

        limit = _sys.getrecursionlimit()
        _sys.setrecursionlimit(max(limit, 10_000))
        try:
            cycle = self._find_algebraic_loop()
        finally:
            _sys.setrecursionlimit(limit)
        if cycle is None:
            return
        flat = self._flat()

        def describe(node: tuple[Any, ...]) -> str:
            leaf = self._system_at(flat.leaf_paths[node[1]])
            port = leaf.get_input_port(node[2]) if node[0] == "in" else leaf.get_output_port(node[2])
            return port.get_full_description()

        lines = []
        for a in cycle[:-1]:
            verb = "is direct-feedthrough to" if a[0] == "in" else "is connected to"
            lines.append(f"  {describe(a)} {verb}")
        lines.append(f"  {describe(cycle[-1])}")
        raise AlgebraicLoopError(
            "Algebraic loop detected in DiagramBuilder:\n"
            + "\n".join(lines)
            + "\nEvery 'is direct-feedthrough to' line above is an output that depends on its "
            "input at the same instant. jaxsys finds feedthrough by tracing each output's calc, so "
            "these dependencies are real unless an output declared direct_feedthrough=True "
            "conservatively; break the loop with a state (e.g. a ZeroOrderHold or a first-order lag)."
        )

    # ===== subsystem contexts ======================================================================
    def get_subsystem_context(self, context: Context, subsystem: System) -> Context:
        """The context of ``subsystem`` (any depth) inside this diagram's ``context``.

        Its connected input ports hold the values they have in the diagram at ``context``, so
        ``subsystem.get_input_port(i).eval(subcontext)`` works as in Drake; they are snapshots,
        not recomputed if you change the subcontext. (Drake: ``GetSubsystemContext`` /
        ``GetMyContextFromRoot``.)
        """
        self.validate_context(context)
        path = self._path_of(subsystem)
        ev = self._evaluator(context)
        sub = ev.context_at(path)
        if not path:
            return sub
        self._flat()
        resolve_in = self._spec.resolve_in
        inputs = list(sub.inputs)
        for k in range(subsystem.num_input_ports()):
            src = resolve_in(path, k)
            if src[0] == "fixed" and src[1] == path:
                continue
            try:
                inputs[k] = ev.source_value(src)
            except InputPortNotConnectedError:
                inputs[k] = None
        return dataclasses.replace(sub, inputs=tuple(inputs))

    def get_subsystem_state(self, context: Context, subsystem: System) -> Any:
        """The State of ``subsystem`` in ``context`` (Drake: ``GetSubsystemState``)."""
        return self.get_subsystem_context(context, subsystem).get_state()

    def set_subsystem_context(self, context: Context, subsystem: System, subcontext: Context) -> Context:
        """A copy of ``context`` with ``subsystem``'s context replaced by ``subcontext``.

        Values on connected input ports of ``subcontext`` are dropped (they come from the diagram);
        values fixed on unconnected ports are kept. The diagram's time is kept.
        (Functional form of Drake's ``GetMutableSubsystemContext``.)
        """
        self.validate_context(context)
        subsystem.validate_context(subcontext)
        path = self._path_of(subsystem)
        if not path:
            return subcontext
        self._flat()
        resolve_in = self._spec.resolve_in
        inputs = list(subcontext.inputs)
        for k in range(subsystem.num_input_ports()):
            src = resolve_in(path, k)
            if not (src[0] == "fixed" and src[1] == path):
                inputs[k] = None
        subcontext = dataclasses.replace(subcontext, inputs=tuple(inputs)).with_time(context.time)

        def replace(ctx: DiagramContext, rest: Path) -> DiagramContext:
            i = rest[0]
            sub = subcontext if len(rest) == 1 else replace(ctx._subcontext(i), rest[1:])  # type: ignore[arg-type]
            return ctx.with_subcontext(i, sub)

        return replace(context, path)  # type: ignore[arg-type]

    with_subsystem_context = set_subsystem_context

    # ===== constraints ==========================================================================
    def _all_constraints(self) -> list[tuple[SystemConstraint, Callable[[Context], Context]]]:
        out = list(super()._all_constraints())
        for p in self._flat().leaf_paths:
            leaf = self._system_at(p)
            for c in leaf._spec.constraints:
                out.append((c, lambda ctx, _leaf=leaf: self.get_subsystem_context(ctx, _leaf)))
        return out


__all__ = ["Diagram", "LeafSystem"]
