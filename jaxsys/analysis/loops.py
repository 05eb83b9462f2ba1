"""The loop primitives both stepping loops build on, and the bundle of what a run needs.

* `Run`: the system, its start context, the integrator, the vector field and the save times:
  what [`simulate`][jaxsys.simulate] hands to the fixed-step scan (`fixed_step`) or the stepping
  while loop (`stepping`).
* `bounded_while` (from `bounded`): a while loop of at most ``max_steps`` passes that JAX
  differentiates in both modes (nested, checkpointed scans).
* `while_fast_primal`: a while loop that runs as a plain ``lax.while_loop`` when evaluated and
  is differentiated by `adjoint` (discrete adjoint; forward sensitivity).
* `while_with_writes_fast_primal`: the same for a loop that also fills write-only buffers (the
  saving loop's rows), which it updates in place when evaluated.
* `WhileLoop` / `make_while_loop`: the loop flavour a ``simulate(loop=...)`` option selects.

Imports: the framework (System, Context), `integrators.base`, `bounded` and `adjoint`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np
from jax._src.ad_util import stop_gradient_p
from jax.interpreters import ad

from ..framework.context import Context
from ..framework.system import System
from .adjoint import loop_jvp
from .bounded import _has_side_effects as _has_side_effects, bounded_levels as bounded_levels, bounded_while
from .integrators.base import IntegratorBase


Array = jax.Array


def _stop_gradient_transpose(ct: Any, x: Any) -> tuple[Any]:
    return (ct,)


# JAX issues #22011 / #39219: ``cond``'s batching rule (a batched predicate turns it into a select)
# wraps every operand in ``stop_gradient``, tangents included, and ``stop_gradient`` has no transpose
# rule; so ``grad(sum(vmap(f)))`` fails for any custom_jvp ``f`` whose rule holds a ``cond``, as
# `while_fast_primal`'s does. On a tangent, ``stop_gradient`` is the identity, whose transpose
# is the identity: the rule lineax and optimistix register for the same bug (registered here only if
# none is, so whichever library is imported first, the rule is the same).
ad.primitive_transposes.setdefault(stop_gradient_p, _stop_gradient_transpose)


class Run(NamedTuple):
    """What both loops (scan and while) need from [`simulate`][jaxsys.simulate].

    **Fields:**
    - `system`, `context`: the system and its context at the start (after initialization events).
    - `integrator`: the integrator module (static options).
    - `f`: ``f(t, x) -> xdot`` at the start context's discrete state and parameters.
    - `aux`: what integrators need besides ``f`` (``num_q``, ``num_v``, ``v_to_qdot``, ``rolled``)
      and the progress meter (``progress``).
    - `record`: ``record(context) -> pytree`` saved at ``ts``.
    - `x0`, `t0`, `t_final`: start state and time, end time.
    - `ts`: the save times, shape ``(n,)``.
    """

    system: System
    context: Context
    integrator: IntegratorBase
    f: Callable[..., Array]
    aux: Any
    record: Callable[[Context], Any]
    x0: Array
    t0: Array
    t_final: Array
    ts: Array


# Side-effecting primitives: a body holding one is never run on a finished carry (see bounded_while).
def while_fast_primal(
    cond: Any, body: Any, init: Any, max_steps: int, reverse: str = "adjoint", between_saves: bool = False
) -> Any:
    """A while loop that runs as a plain ``lax.while_loop`` when it is evaluated, and is
    differentiated by `adjoint` (``reverse="adjoint"``, the default: forward mode by the plain
    loop's JVP, reverse mode by the discrete adjoint from checkpoints placed at run time, second
    order through `bounded_while`), or by `bounded_while`'s JVP and its transpose
    (``reverse="bounded"``: nested scans, a fixed price per entry; kept for comparison).

    A ``custom_jvp`` keeps the fast loop for evaluation, ``vmap`` included; all loops run the same
    body, so values are identical. Closed-over arrays become explicit arguments
    (`closure`; packed by `packed` inside the ``custom_jvp``, apart by whether their
    tangent is zero) so that derivatives with respect to them are seen. ``between_saves``: the
    stepping loop run between save times (the choice of its reverse mode: `loop_jvp`).
    """
    body_c, body_consts = closure(body, init)
    cond_c, cond_consts = closure(cond, init)

    @jax.custom_jvp
    def run(c0: Any, bc: Any, cc: Any) -> Any:
        # (the consts packed here, inside: their tangents are known apart in the rule; the body's own
        # condition bounds the attempts: no extra step counter)
        body_p, bp, _ = packed(body_c, list(bc))
        cond_p, cp, _ = packed(cond_c, list(cc))
        return jax.lax.while_loop(lambda c: cond_p(c, *cp), lambda c: body_p(c, *bp), c0)

    def run_jvp(primals: Any, tangents: Any) -> Any:
        c0, bc, cc = primals
        body_p, bp, dbp_ = packed(body_c, list(bc), list(tangents[1]))
        cond_p, cp, dcp_ = packed(cond_c, list(cc), list(tangents[2]))
        dbp, dcp = dbp_ or [], dcp_ or []  # (tangents given: lists)
        if reverse == "adjoint":
            primals = (c0, tuple(bp), tuple(cp))
            return loop_jvp(body_p, cond_p, primals, (tangents[0], tuple(dbp), tuple(dcp)), max_steps, between_saves)

        def bounded(c0: Any, bp: Any, cp: Any) -> Any:
            return bounded_while(lambda c: cond_p(c, *cp), lambda c: body_p(c, *bp), c0, max_steps)

        primals = (c0, tuple(bp), tuple(cp))
        return jax.jvp(bounded, primals, _materialize(primals, (tangents[0], tuple(dbp), tuple(dcp))))

    run.defjvp(run_jvp, symbolic_zeros=True)

    return run(init, tuple(body_consts), tuple(cond_consts))


def _materialize(primals: Any, tangents: Any) -> Any:
    """Tangents with symbolic zeros replaced by zeros (float0 for integer primals)."""

    def one(p: Any, t: Any) -> Any:
        if not isinstance(t, jax.custom_derivatives.SymbolicZero):
            return t
        if jnp.issubdtype(jnp.result_type(p), jnp.inexact):
            return jnp.zeros(jnp.shape(p), jnp.result_type(p))
        return np.zeros(jnp.shape(p), jax.dtypes.float0)

    return jax.tree_util.tree_map(
        one, primals, tangents, is_leaf=lambda t: isinstance(t, jax.custom_derivatives.SymbolicZero)
    )


# loop invariants smaller than this (elements) are packed into one vector per dtype
_PACK_MAX_SIZE = 4096
_PACK_MIN_COUNT = 8


def pack_arrays(
    arrays: list[Array], keys: list[Any] | None = None
) -> tuple[list[Array], Callable[[list[Array]], list[Array]], Callable[[list[Any]], list[Any]]]:
    """Pack many small arrays into one flat vector per dtype (and per ``keys[i]``, when given);
    returns ``(packed, unpack, pack)``: ``pack(values)`` packs another list laid out like ``arrays``
    (their tangents, say) the same way, a group of symbolic zeros into a symbolic zero.

    A loop body that closes over hundreds of small arrays (the per-leaf parameters of a diagram of
    distinct leaves) makes every one of them an element of the loop's carried tuple, and XLA's CPU
    runtime pays per element and per iteration. Packed, the loop carries a few vectors and the body
    takes static slices of them (which fuse into their users). Arrays with more than
    ``_PACK_MAX_SIZE`` elements, and lists of fewer than ``_PACK_MIN_COUNT`` small arrays, are kept.
    ``keys`` keeps apart arrays that must stay apart: those with a tangent and those without (packed
    together, a derivative's analysis would see a tangent on all of them).
    """
    keys = [None] * len(arrays) if keys is None else list(keys)
    # (weak-typed constants are kept as they are: a slice of a packed vector would not be weak)
    small = [i for i, a in enumerate(arrays) if a.size <= _PACK_MAX_SIZE and not getattr(a, "weak_type", False)]
    if len(small) < _PACK_MIN_COUNT:
        return list(arrays), list, list
    groups: dict[Any, list[int]] = {}
    for i in small:
        groups.setdefault((jnp.result_type(arrays[i]), keys[i]), []).append(i)
    small_set = set(small)
    keep = [i for i in range(len(arrays)) if i not in small_set]
    where: dict[int, tuple[int, int, int]] = {}  # index -> (packed vector, offset, size)
    for k, idx in enumerate(groups.values()):
        off = 0
        for i in idx:
            where[i] = (len(keep) + k, off, arrays[i].size)
            off += arrays[i].size
    shapes = [a.shape for a in arrays]
    kept_at = {i: j for j, i in enumerate(keep)}

    def pack(values: list[Any]) -> list[Any]:
        out = [values[i] for i in keep]
        for (dtype, _), idx in groups.items():
            if all(_is_symbolic_zero(values[i]) for i in idx):
                size = sum(arrays[i].size for i in idx)
                out.append(jax.custom_derivatives.SymbolicZero(jax.core.ShapedArray((size,), dtype)))
            else:
                parts = [jnp.zeros(shapes[i], dtype) if _is_symbolic_zero(values[i]) else values[i] for i in idx]
                out.append(jnp.concatenate([jnp.ravel(v) for v in parts]))
        return out

    def unpack(vectors: list[Array]) -> list[Array]:
        out = []
        for i, shape in enumerate(shapes):
            if i in kept_at:
                out.append(vectors[kept_at[i]])
            else:
                k, off, n = where[i]
                out.append(jax.lax.slice(vectors[k], (off,), (off + n,)).reshape(shape))
        return out

    return pack(list(arrays)), unpack, pack


def _is_symbolic_zero(x: Any) -> bool:
    return isinstance(x, jax.custom_derivatives.SymbolicZero)


def closure(fn: Callable[..., Any], *example: Any) -> tuple[Callable[..., Any], list[Array]]:
    """Closure conversion: ``fn_c(*args, *consts)`` equals ``fn(*args)`` (see `closure_and_shape`)."""
    fn_c, consts, _ = closure_and_shape(fn, *example)
    return fn_c, consts


def closure_and_shape(fn: Callable[..., Any], *example: Any) -> tuple[Callable[..., Any], list[Array], Any]:
    """Closure conversion: ``fn_c(*args, *consts)`` equals ``fn(*args)``; also the output's shapes
    (a pytree of ``ShapeDtypeStruct``), from the same trace.

    Every tracer ``fn`` closes over is hoisted, integer ones included (``jax.closure_convert`` keeps
    those closed over: a traced integer bound of a loop, under ``grad`` of a ``jit``'d function,
    would then leak into the derivative's trace); concrete constants stay closed over (compile-time
    constants: hoisted, 300 distinct leaves' parameters ran 2x slower)."""
    flat, in_tree = jax.tree_util.tree_flatten(example)
    closed, out_shape = jax.make_jaxpr(lambda *a: fn(*jax.tree_util.tree_unflatten(in_tree, a)), return_shape=True)(
        *flat
    )
    out_tree = jax.tree_util.tree_structure(out_shape)
    consts = list(closed.consts)
    traced = [i for i, c in enumerate(consts) if isinstance(c, jax.core.Tracer)]
    n = len(traced)

    def fn_c(*args: Any) -> Any:
        all_consts = list(consts)
        for i, v in zip(traced, args[len(args) - n :]):
            all_consts[i] = v
        out = jax.core.eval_jaxpr(closed.jaxpr, all_consts, *jax.tree_util.tree_leaves(args[: len(args) - n]))
        return jax.tree_util.tree_unflatten(out_tree, out)

    return fn_c, [consts[i] for i in traced], out_shape


def packed(
    fn_c: Callable[..., Any], consts: list[Array], tangents: list[Any] | None = None
) -> tuple[Callable[..., Any], list[Array], list[Any] | None]:
    """``(fn_p, packed consts, their tangents)`` for ``fn_c(*args, *consts)`` of `closure`:
    ``fn_p(*args, *packed)`` equals it, the consts packed by `pack_arrays`, apart by whether
    their tangent (``tangents``: None, or a list with symbolic zeros) is zero."""
    keys = None if tangents is None else [_is_symbolic_zero(t) for t in tangents]
    vectors, unpack, pack = pack_arrays(list(consts), keys)
    n = len(vectors)

    def fn_p(*args: Any) -> Any:
        return fn_c(*args[: len(args) - n], *unpack(list(args[len(args) - n :])))

    return fn_p, vectors, None if tangents is None else pack(list(tangents))


Writes = list[tuple[Array, Any, Array]]


def apply_writes(buffers: Any, writes: Writes) -> Any:
    """``buffers`` (a pytree of arrays with a leading row axis, or equinox buffers) with each write
    ``(row, value, pred)`` applied: row ``row`` set to ``value`` (a pytree like one row) where
    ``pred``."""
    for row, value, pred in writes:
        # (the value's tree first: inside equinox's loop each buffer array is a buffer object, a subtree)
        buffers = jax.tree_util.tree_map(
            lambda v, b, row=row, pred=pred: eqxi.buffer_at_set(b, row, jnp.asarray(v).astype(b.dtype), pred=pred),
            value,
            buffers,
        )
    return buffers


def while_with_writes_fast_primal(cond: Any, body: Any, init: Any, buffers0: Any, max_steps: int) -> tuple[Any, Any]:
    """A while loop that also fills write-only buffers: ``body(carry) -> (carry, writes)`` (see
    `apply_writes`); returns ``(carry, buffers)``. The saving loop: one pass per save time.

    A plain ``lax.while_loop`` when evaluated (the buffers updated in place). Differentiated, the
    same passes as `scan_with_writes`: a scan of ``max_steps`` passes in blocks (each block's
    passes recomputed once in reverse mode), the writes collected as the scan's outputs, so that
    the buffers are never carried or checkpointed; a finished pass is skipped by a conditional (one
    per save: cheap against the stepping loop inside it). Only the carry leaves and consts with a
    tangent are differentiated (the consts are packed apart by that), so that a run's times and step
    sizes are not swept by the stepping loops inside: with 100 save times, ``jax.grad`` of a pendulum
    over 11,700 attempts 15 ms against 27 ms through equinox's bounded loop with buffers.
    """
    body_c, body_consts = closure(body, init)
    cond_c, cond_consts = closure(cond, init)

    @jax.custom_jvp
    def run(c0: Any, b0: Any, bc: Any, cc: Any) -> Any:
        body_p, bp, _ = packed(body_c, list(bc))
        cond_p, cp, _ = packed(cond_c, list(cc))

        # (at most max_steps passes, as the derivative's scan: a loop whose condition never turns
        # false, on NaN times say, stops)
        def cond_n(s: Any) -> Any:
            return (s[2] < max_steps) & cond_p(s[0], *cp)

        def body_n(s: Any) -> Any:
            c2, writes = body_p(s[0], *bp)
            return c2, apply_writes(s[1], writes), s[2] + 1

        c, b, _ = jax.lax.while_loop(cond_n, body_n, (c0, b0, jnp.zeros((), jnp.int32)))
        return c, b

    def run_jvp(primals: Any, tangents: Any) -> Any:
        c0, b0, bc, cc = primals
        body_p, bp, dbp = packed(body_c, list(bc), list(tangents[2]))
        cond_p, cp, _ = packed(cond_c, list(cc))

        def scan(c0: Any, b0: Any, bp: list[Array]) -> Any:
            return scan_with_writes(lambda c: cond_p(c, *cp), lambda c: body_p(c, *bp), c0, b0, max_steps)

        return jvp_nonzero(scan, (c0, b0, bp), (tangents[0], tangents[1], dbp))

    run.defjvp(run_jvp, symbolic_zeros=True)

    return run(init, buffers0, tuple(body_consts), tuple(cond_consts))


# scan_with_writes: up to this many passes in one scan (reverse mode keeps every pass's residuals:
# a stepping loop's checkpoints, up to 64 KB, per save); more in blocks of ~sqrt(passes), each block
# recomputed once in reverse mode
WRITES_UNBLOCKED = 128


def scan_with_writes(cond: Any, body: Any, c0: Any, buffers0: Any, max_steps: int) -> tuple[Any, Any]:
    """``while cond(c): c, writes = body(c)`` for at most ``max_steps`` passes, as scans JAX
    differentiates: ``max_steps`` passes in blocks of ``WRITES_BLOCK`` under ``jax.checkpoint``, a
    finished pass skipped by a conditional (under ``vmap``: run unless no member goes on, each
    member's finished passes discarded by a select). The writes are the scans' outputs, applied to
    ``buffers0`` after them (a row a write does not hit goes to a discarded extra row: no row is
    written twice, and no out-of-range index, whose gather in reverse mode fills NaN)."""
    _, out_shapes = jax.eval_shape(body, c0)

    def one(c: Any, _: Any) -> Any:
        go = cond(c)

        def run(c: Any) -> Any:
            new, writes = body(c)
            new = jax.tree_util.tree_map(lambda a, b: jnp.where(go, a, b), new, c)
            return new, [(row, value, pred & go) for row, value, pred in writes]

        def skip(c: Any) -> Any:
            return c, jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), out_shapes)

        return jax.lax.cond(eqxi.unvmap_any(go), run, skip, c)

    if max_steps <= WRITES_UNBLOCKED:
        c, ws = jax.lax.scan(one, c0, None, length=max_steps)
    else:
        size = int(np.ceil(np.sqrt(max_steps)))
        n_blocks = -(-max_steps // size)

        @jax.checkpoint
        def block(c: Any, _: Any) -> Any:
            return jax.lax.scan(one, c, None, length=size)

        c, ws = jax.lax.scan(block, c0, None, length=n_blocks)
        ws = jax.tree_util.tree_map(lambda a: a.reshape((n_blocks * size, *a.shape[2:])), ws)
    buffers = buffers0
    for rows, values, preds in ws:

        def put(buf: Array, v: Array, rows: Array = rows, preds: Array = preds) -> Array:
            n = buf.shape[0]
            ext = jnp.concatenate([buf, jnp.zeros((1, *buf.shape[1:]), buf.dtype)])
            return ext.at[jnp.where(preds, rows, n)].set(v.astype(buf.dtype))[:n]

        buffers = jax.tree_util.tree_map(put, buffers, values)
    return c, buffers


def jvp_nonzero(fn: Callable[..., Any], primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, Any]:
    """``jax.jvp(fn, primals, tangents)`` where ``tangents`` may hold symbolic zeros (a custom_jvp
    rule's, with ``symbolic_zeros=True``): the leaves with one are held fixed, not given zero
    tangents, so that the loops inside ``fn`` see which leaves carry a derivative. (``jax.jvp`` gives
    the outputs no tangent reaches zeros, float0 for integers.)"""
    leaves, tree = jax.tree_util.tree_flatten(primals)
    t_leaves = jax.tree_util.tree_leaves(tangents, is_leaf=_is_symbolic_zero)
    live = [
        i
        for i, (x, t) in enumerate(zip(leaves, t_leaves))
        if not _is_symbolic_zero(t) and jnp.issubdtype(jnp.result_type(x), jnp.inexact)
    ]

    def f(*xs: Any) -> Any:
        full = list(leaves)
        for i, x in zip(live, xs):
            full[i] = x
        return fn(*jax.tree_util.tree_unflatten(tree, full))

    return jax.jvp(f, tuple(leaves[i] for i in live), tuple(t_leaves[i] for i in live))


class WhileLoop:
    """The loop flavour ``simulate(loop=...)`` asks for: ``while_loop(cond, body, init, max_steps)``,
    and `with_writes` for a loop that fills buffers (the saving loop).

    ``"bounded"``: `while_fast_primal` / `while_with_writes_fast_primal` (plain while loops
    when evaluated). ``"checkpointed"``: equinox's checkpointed loop with ``checkpoints`` saved states
    for reverse mode (no forward mode).
    """

    def __init__(self, loop: str, checkpoints: int | None) -> None:
        if loop not in ("bounded", "checkpointed"):
            raise ValueError(f"unknown loop kind {loop!r}")
        self.loop = loop
        self.checkpoints = checkpoints

    def __call__(self, cond: Any, body: Any, init: Any, max_steps: int, between_saves: bool = False) -> Any:
        """The loop; ``between_saves``: the stepping loop run between save times (`while_fast_primal`)."""
        if self.loop == "bounded":
            return while_fast_primal(cond, body, init, max_steps, between_saves=between_saves)
        return eqxi.while_loop(cond, body, init, max_steps=max_steps, kind="checkpointed", checkpoints=self.checkpoints)

    def with_writes(self, cond: Any, body: Any, init: Any, buffers0: Any, max_steps: int) -> tuple[Any, Any]:
        """``(carry, buffers)`` after looping ``body(carry) -> (carry, writes)`` while ``cond(carry)``."""
        if self.loop == "bounded":
            return while_with_writes_fast_primal(cond, body, init, buffers0, max_steps)

        def step(s: Any) -> Any:
            c2, writes = body(s[0])
            return c2, apply_writes(s[1], writes)

        return eqxi.while_loop(
            lambda s: cond(s[0]),
            step,
            (init, buffers0),
            max_steps=max_steps,
            kind="checkpointed",
            checkpoints=self.checkpoints,
            buffers=lambda s: s[1],
        )


def make_while_loop(loop: str, checkpoints: int | None) -> WhileLoop:
    """The `WhileLoop` of the kind ``simulate(loop=...)`` asks for."""
    return WhileLoop(loop, checkpoints)
