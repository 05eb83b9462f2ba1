"""The context of a Diagram (Drake's ``DiagramContext``), with packed storage.

A DiagramContext holds one subcontext per subsystem. The contexts of identical leaf subsystems (a
chain of 300 lags) are stored stacked in *packs* described by a static `PackLayout`, so a
large diagram's context is a few arrays; every accessor still sees ordinary per-subsystem contexts.
The continuous state is read and written block-wise with a static permutation to Drake's
``[q..., v..., z...]`` order.

Imports: `context` (the Context base and LeafContext), `values`, `ids`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .context import Context, LeafContext
from .errors import StateError
from .ids import INVALID_SYSTEM_ID, describe_system_id
from .values import ContinuousState, _pytree_dataclass, _static, refuse_complex, with_system_id


Array = jax.Array


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


def _take_member(tree: Any, m: int) -> Any:
    return jax.tree_util.tree_map(lambda a: a[m], tree)


def _pack_signature(leaf: Any) -> Any:
    """Structure, shapes and dtypes of a leaf context (ids ignored), or None if it cannot be stacked."""
    vals, treedef = jax.tree_util.tree_flatten(with_system_id(leaf, INVALID_SYSTEM_ID))
    out: list[Any] = []
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
    - `layout`: a `PackLayout`: where each subcontext is stored (static).
    - `accuracy`: the requested accuracy (static; see `Context.with_accuracy`), or None.

    The storage is invisible to users: `subcontexts` and every accessor return ordinary
    per-subsystem contexts.
    """

    time: Array
    loose: tuple[Context, ...]
    packs: tuple[LeafContext, ...]
    inputs: tuple[Any, ...]
    system_id: int = _static(INVALID_SYSTEM_ID)
    layout: PackLayout = _static(PackLayout((), ()))
    accuracy: float | None = _static(None)

    @staticmethod
    def make(
        time: Any,
        subcontexts: Sequence[Context],
        inputs: tuple[Any, ...],
        system_id: int,
        plan: Sequence[Sequence[int]] = (),
        accuracy: float | None = None,
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
        loose: list[Any] = []
        slots = []
        for i, sub in enumerate(subs):
            if i in slot:
                slots.append(slot[i])
            else:
                slots.append((-1, len(loose)))
                loose.append(sub)
        layout = PackLayout(tuple(slots), tuple(members_all))
        return DiagramContext(time, tuple(loose), tuple(packs), inputs, system_id, layout, accuracy)

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
        return DiagramContext.make(self.time, subs, self.inputs, self.system_id, self.layout.plan(), self.accuracy)

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
                loose: Any = self.loose[m]
                n = loose._num_leaves()
                subs.append(loose._with_leaf_contexts(leaves[pos : pos + n]))
                pos += n
        return DiagramContext.make(self.time, subs, self.inputs, self.system_id, self.layout.plan(), self.accuracy)

    def num_subcontexts(self) -> int:
        """Number of subsystem contexts."""
        return len(self.layout.slots)

    def with_time(self, t: Any) -> DiagramContext:
        """A copy at time ``t`` in this context and every subcontext (Drake: ``SetTime``)."""
        refuse_complex(t, "The time", self.system_id)
        t = jnp.asarray(t, dtype=self.time.dtype)
        loose = tuple(s.with_time(t) for s in self.loose)
        packs = tuple(
            dataclasses.replace(p, time=jnp.broadcast_to(t, (len(m),))) for p, m in zip(self.packs, self.layout.members)
        )
        return DiagramContext(t, loose, packs, self.inputs, self.system_id, self.layout, self.accuracy)

    # --- continuous state in storage blocks (a loose leaf, or a whole pack) -----------------------
    def _cont_blocks(self, first_leaf: int = 0) -> tuple[list[tuple[Array, list[int], tuple[int, int, int]]], int]:
        """Blocks of continuous state in storage order (loose subcontexts, then packs): (x as stored:
        shape (n,) for a loose leaf, (members, n) for a pack; leaf positions of the members,
        (num_q, num_v, num_z) per member); and the position after the last leaf. (Stored arrays as
        they are: an eager accessor then runs no array operation for a diagram with one block.)"""
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
                blocks.append((cs.x, [li], (cs.num_q, cs.num_v, cs.num_z)))
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
        pieces = [x if np.ndim(x) == 1 else x.reshape(-1) for x, _, _ in blocks if np.size(x)]
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
        refuse_complex(x, "The continuous state", self.system_id)
        x = jnp.asarray(x)
        if not np.array_equal(perm, np.arange(n)):
            x = x[np.argsort(perm)]
        xs, off = [], 0
        for xb, _, _ in blocks:
            k = int(np.size(xb))
            if k == n and np.ndim(xb) == 1:
                xs.append(x)  # (the only block, stored as a vector: no array operation)
            else:
                xs.append(x[off : off + k].reshape(np.shape(xb)) if k else xb)
            off += k
        return self._with_cont_blocks(xs)

    def _with_cont_blocks(self, xs: list[Array]) -> DiagramContext:
        """Inverse of `_cont_blocks`: new x per block, same order; consumes ``xs``."""
        loose: list[Context] = []
        for sub in self.loose:
            if isinstance(sub, DiagramContext):
                loose.append(sub._with_cont_blocks(xs))
            else:
                x = xs.pop(0)
                cs = sub.state.continuous_state
                loose.append(sub._replace_state(continuous_state=dataclasses.replace(cs, x=_as_dtype(x, cs.x.dtype))))
        packs = []
        for pack in self.packs:
            x = xs.pop(0)
            cs = pack.state.continuous_state
            packs.append(pack._replace_state(continuous_state=dataclasses.replace(cs, x=_as_dtype(x, cs.x.dtype))))
        return DiagramContext(
            self.time, tuple(loose), tuple(packs), self.inputs, self.system_id, self.layout, self.accuracy
        )


def _as_dtype(x: Any, dtype: Any) -> Any:
    """``x`` in ``dtype`` (itself when it already is: no array operation)."""
    return x if getattr(x, "dtype", None) == dtype else jnp.asarray(x).astype(dtype)


def _cont_layout(blocks: list[tuple[Array, list[int], tuple[int, int, int]]]) -> tuple[np.ndarray, int, int, int]:
    """Static permutation from storage order (blocks flattened) to Drake's [q..., v..., z...] order."""
    per_leaf: dict[int, tuple[int, tuple[int, int, int]]] = {}
    off = 0
    for x, leaves, sizes in blocks:
        shape = np.shape(x)
        n = int(shape[-1]) if len(shape) in (1, 2) else 0
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
