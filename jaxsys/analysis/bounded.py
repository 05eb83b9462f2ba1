"""A while loop of at most ``max_steps`` passes that JAX differentiates to any order, in both modes
(`bounded_while`: equinox's bounded loop of nested checkpointed scans, with an innermost block of
passes run unconditionally), and what both the loops (`loops`) and the discrete adjoint (`adjoint`)
ask of a loop body (`_has_side_effects`).

Imports: nothing from jaxsys.
"""

from __future__ import annotations

from typing import Any

import equinox.internal as eqxi
import jax
import jax.numpy as jnp


_EFFECT_PRIMITIVES = ("callback", "error", "print", "unreachable")


def _has_side_effects(jaxpr: Any) -> bool:
    """Whether a (closed) jaxpr, sub-jaxprs included, holds a host callback, an error check or any
    other side effect: such a body must not be run on a carry whose condition is false."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    if jaxpr.effects:
        return True
    for eqn in jaxpr.eqns:
        if any(k in eqn.primitive.name for k in _EFFECT_PRIMITIVES):
            return True
        for v in eqn.params.values():
            for sub in v if isinstance(v, (tuple, list)) else (v,):
                if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
                    if _has_side_effects(sub):
                        return True
    return False


# innermost block of bounded_while (passes run unconditionally, the finished ones discarded by a
# select) and the block above it
BOUNDED_INNER = 16
# length of the blocks further out: 64 for carries of at most this many bytes, 16 above
BOUNDED_OUTER_SMALL_CARRY_BYTES = 2048


def bounded_levels(max_steps: int, carry_bytes: int) -> list[int]:
    """The block lengths of `bounded_while`, innermost first: their product is at least
    ``max_steps``.

    Two forces, measured on a CPU: each level is one more recomputation of the forward run in reverse
    mode (long runs want few levels), and each loop entry pays for the passes its blocks skip (a loop
    entered often, between save times or events, wants short blocks). Blocks of 16, 16, then 64
    balance them for small carries (a 2-state pendulum's gradient through 11,500 steps: 21 ms with
    ``[16, 16, 64, 64]``, 24 ms with ``[16] * 5``; with 100 save times: 42 and 39 ms); large carries,
    whose checkpoints cost memory traffic per pass, keep blocks of 16.
    """
    outer = 64 if carry_bytes <= BOUNDED_OUTER_SMALL_CARRY_BYTES else BOUNDED_INNER
    levels = [BOUNDED_INNER]
    total = BOUNDED_INNER
    while total < max_steps:
        n = min(BOUNDED_INNER if len(levels) == 1 else outer, -(-max_steps // total))
        levels.append(n)
        total *= n
    return levels


def bounded_while(cond: Any, body: Any, init: Any, max_steps: int) -> Any:
    """A while loop of at most ``max_steps`` passes that JAX can differentiate in both modes: nested
    scans of conditional blocks, each block above the innermost checkpointed (recomputed in reverse
    mode, so memory grows with the number of levels, not of steps).

    The same construction as equinox's bounded loop (``equinox.internal.while_loop(kind="bounded")``)
    with two differences measured on a CPU: the innermost block of 16 passes runs its passes
    unconditionally and keeps the finished ones' carries by a select (in reverse mode a conditional per
    pass costs ~2-3 us, more than a small system's whole step); and further out, blocks of 64 for small
    carries (fewer levels, so fewer recomputations; see `bounded_levels`). A finished pass runs
    the body on its block's first carry, a state the loop really stepped from, so that reverse mode
    never meets the body's partials at a finished state (which may be infinite: a zero cotangent times
    them is NaN). A body holding a side effect (a host callback, an error check) is never run by a
    finished pass: it keeps a conditional per pass (found from the body's jaxpr). Under ``vmap`` the
    conditionals ask whether any member goes on. Reverse mode through 11,500 steps of a pendulum
    (benchmark S2a-grad, calls interleaved): 21 ms against 35 ms for equinox's loop, 2.4 ms forward;
    with 100 save times, 42 ms against 55 ms.
    """
    leaves = jax.tree_util.tree_leaves(init)
    carry_bytes = sum(jnp.size(x) * jnp.result_type(x).itemsize for x in leaves)
    levels = bounded_levels(max_steps, carry_bytes)
    guarded = _has_side_effects(jax.make_jaxpr(body)(init))

    # Under vmap the conditionals test whether any member goes on (``unvmap_any``: a batched
    # predicate would turn a conditional into a select, running every pass of every block), and each
    # member keeps its own carry by the select.
    # A finished pass runs the body on the block's first carry (one that went on: blocks are entered
    # only then), not on the finished one: a body run on a finished carry (a step of size zero, say)
    # may have infinite partials, and a zero cotangent times an infinite partial is NaN in reverse.
    def select(go: Any, a: Any, b: Any) -> Any:
        return jax.tree_util.tree_map(lambda a, b: jnp.where(go, a, b), a, b)

    def inner_block(entry: Any) -> Any:
        def inner_pass(c: Any, _: Any) -> tuple[Any, None]:
            go = cond(c)
            arg = select(go, c, entry)
            new = jax.lax.cond(eqxi.unvmap_any(go), body, lambda c: c, arg) if guarded else body(arg)
            return select(go, new, c), None

        return jax.lax.scan(inner_pass, entry, None, length=levels[0])[0]

    def block(c: Any, k: int) -> Any:
        if k == 0:
            return inner_block(c)

        def outer_pass(c: Any, _: Any) -> tuple[Any, None]:
            return jax.lax.cond(eqxi.unvmap_any(cond(c)), lambda c: block(c, k - 1), lambda c: c, c), None

        return jax.lax.scan(jax.checkpoint(outer_pass, prevent_cse=False), c, None, length=levels[k])[0]

    # (entered only if the loop runs at all: a block's first carry is one that goes on)
    top = len(levels) - 1
    return jax.lax.cond(eqxi.unvmap_any(cond(init)), lambda c: block(c, top), lambda c: c, init)
