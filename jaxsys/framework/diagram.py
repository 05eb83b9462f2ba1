"""``Diagram``: a System made of subsystems wired together (Drake's ``Diagram<T>``).

A Diagram is built by a [`DiagramBuilder`][jaxsys.DiagramBuilder]. It is itself a System, so diagrams nest.
Its context holds one subcontext per subsystem. At build time the whole tree of subsystems is
flattened once into its leaves, every leaf input is resolved to its source (a leaf output port, or a
value fixed on some context in the tree), direct feedthrough is composed, and algebraic loops are
detected. Evaluating an output or the time derivatives of a Diagram then walks only the leaves it
needs, each output computed once per evaluation (outputs are memoized for the duration of one
call; under ``jax.jit`` this is one traced computation).

Imports (within jaxsys): ``constraints``, ``context``, ``diagram_evaluator``, ``errors``,
``leaf_system``, ``ports``, ``system``, ``vectorize``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from .context import Context, DiagramContext
from .diagram_evaluator import _Evaluator, _Flat, _take
from .errors import AlgebraicLoopError, InputPortNotConnectedError, JaxsysError, PortError
from .leaf_system import LeafSystem, _Lazy, _Unfed
from .ports import InputPort, OutputPort
from .system import System
from .vectorize import find_groups


if TYPE_CHECKING:
    from .constraints import SystemConstraint

Path = tuple[int, ...]


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
            s = s.subsystems[i]
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

    def is_input_port_connected(self, port: InputPort) -> bool:
        """Whether ``port``, an input port of a direct subsystem, is fed inside this diagram: connected
        to an output port, or exported as one of the diagram's inputs (an exported one then has a
        value where the diagram's input has one)."""
        return self._is_input_connected(port.get_system(), port.get_index())

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

    def _state_blocks(self) -> tuple[tuple[int, ...], dict[int, list[int]]]:
        """The continuous state vector cut into blocks: every leaf's q, then every leaf's v, then every
        leaf's z (nonempty ones, in order): (block sizes, leaf -> indices of its q, v, z blocks)."""
        if getattr(self._spec, "state_blocks", None) is None:
            flat = self._flat()
            leaves = [self._system_at(p) for p in flat.leaf_paths]
            sizes: list[int] = []
            blocks: dict[int, list[int]] = {li: [] for li in range(len(leaves))}
            for part in ("num_q", "num_v", "num_z"):
                for li, lf in enumerate(leaves):
                    n = getattr(lf._spec, part)
                    if n:
                        blocks[li].append(len(sizes))
                        sizes.append(n)
            self._spec.state_blocks = (tuple(sizes), blocks)
        return self._spec.state_blocks

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
        return dataclasses.replace(cast(Any, sub), inputs=tuple(inputs))

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
        subcontext = dataclasses.replace(cast(Any, subcontext), inputs=tuple(inputs)).with_time(context.time)

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

            def of_leaf(ctx: Context, _leaf: System = leaf) -> Context:
                return self.get_subsystem_context(ctx, _leaf)

            for c in leaf._spec.constraints:
                out.append((c, of_leaf))
        return out


__all__ = ["Diagram", "LeafSystem"]
