"""Reverse mode through a while loop by its discrete adjoint, with checkpoints placed at run time.

`while_fast_primal` evaluates a loop as a plain ``lax.while_loop``. Differentiated,
its JVP is built here from two primitives that are each other's transpose:

* ``loop_tangent``: the loop's tangent map ``(dc0, dconsts) -> dc_n`` (forward mode: the JVP of the
  plain while loop, a forward sensitivity);
* ``loop_adjoint``: its transpose ``ct_n -> (ct_c0, ct_consts)`` (reverse mode: the discrete adjoint,
  a backward sweep over the passes the loop really made).

So ``jax.jvp`` / ``jax.jacfwd`` run the forward sensitivity and ``jax.grad`` / ``jax.vjp`` the
adjoint; both primitives batch under ``vmap`` by vmapping their rules (equinox's ``create_vprim``).
Second derivatives (``jax.hessian``, ``jacrev(jacrev)``, ``jacfwd(jacfwd)``), which differentiate these
primitives in their non-linear arguments, go through the JVP or VJP of
`bounded_while` instead: nested scans that JAX differentiates to any order.

**By the Jacobian, for few inputs.** A loop differentiated in few scalars (its start carry's and
consts' leaves with a tangent: at most ``JACOBIAN_INPUTS`` for the size of its differentiable carry)
is differentiated by its Jacobian instead: one run of the plain loop carrying a tangent per input
(``vmap`` of its JVP over a basis, the primal computed once) gives the final carry and its Jacobian,
and the loop's tangent is the Jacobian applied to the input tangents, a product JAX transposes
itself. Reverse mode then costs what forward mode does, with no checkpoints and no sweep (S2a-grad:
12.0-12.5 -> 4.3 ms, 1.7-1.8x the forward run; compile 1.6 -> 0.4 s). Forward mode in fewer
directions than the inputs pays for all of them (docs/performance.md).
Its second derivatives go through the bounded loop, as the primitives' below.

**Only what can carry a derivative.** The carry leaves the adjoint sweeps are those whose tangent
can be nonzero: the ones with a tangent at the start, and, to a fixed point, those a pass gives a
tangent from them and from the consts with a tangent (the analysis ``lax.while_loop``'s own JVP
makes). Step sizes under ``stop_gradient``, times and counters drop out (for an error-controlled
pendulum: 23 ms without this analysis, 15 ms with it, before the other measures below).

**Checkpoints placed at run time.** The forward run keeps ``keep`` carries (512 for carries up to
128 bytes, fewer for larger ones, at least 16; ``KEEP_BYTES``): every ``T``-th one, ``T`` starting
at ``segment`` (32) and doubling, every other checkpoint dropped, each time the buffer fills, so
that they span whatever number of passes the run makes. The adjoint sweeps these segments from the
last: a segment of at most ``segment`` passes is replayed by a scan's VJP; a longer one is first
re-run forward keeping up to ``width`` (64 for carries up to 1 KB) checkpoints of it, and its pieces
are swept in turn (further levels of cutting below for very long runs of large carries). A run short
enough for its checkpoints to be ``segment`` apart (the common case) is swept by one loop over them,
without a conditional or a loop entry per segment: on a CPU such control flow per segment, or a
select or conditional that passes the checkpoint buffers through, costs as much as a large part of
the sweep itself.

**One copy of the body.** Re-running goes through the sweep's own replay (its backward pass
skipped), so that the adjoint's program holds the loop's body once, in the replay, whatever the
levels of re-running (a re-run loop of its own was one more copy of the body per level for XLA to
compile, in every gradient program whose bound allows long runs, though most runs never re-run:
issue #40). Each level of re-running is one more run of its passes, at the price of the replay's
forward pass (it keeps residuals: ~1.2x a plain run's; a run that re-runs once costs ~1.2x more
than with a plain re-run loop): none for runs of up to ``keep * segment`` passes (16,384 for a small
carry), one up to 64 times more. Memory: ``keep + width`` carries (``width`` per level) and one
segment's residuals, whatever ``max_steps`` is; no time goes to passes the run does not make (the
bounded loop's scans run through, or skip, all ``max_steps``: a fixed price per entry).

Measured on this 2-core CPU (benchmarks S2a-grad, S8-grad, S8h-300; calls interleaved; S2a-grad
now goes by the Jacobian), the sweep: ``jax.grad``
through 11,700 attempts of an error-controlled pendulum: 10.7 ms, 4.5x its 2.4 ms forward run (the
bounded loop's JVP and transpose: 21.6 ms; this module's first version: 12-15 ms); through 50,000
attempts (re-run once): 60 ms, 5.5x (74 ms); with 100 save times 14.9 ms, 6.1x (42 ms; 26.4 ms before
the saving loop's scans, `scan_with_writes`); through the 29 steps of a 300-lag chain
0.61 ms against Diffrax's
0.76 ms (compile 3.2 s); through the chain of 300 distinct leaf classes 12.8 ms (compile 11.5 s);
``jax.jacfwd`` 7.9 against 8.2 ms.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad

from .bounded import _has_side_effects, bounded_levels, bounded_while
from .precision import HIGHEST


try:  # the nonzero-tangent analysis lax.while_loop's own JVP uses (JAX internals)
    from jax._src.interpreters.ad import jvp_jaxpr as _jvp_jaxpr

    jvp_jaxpr: Any = _jvp_jaxpr
except ImportError:  # pragma: no cover (another JAX: every inexact carry leaf is swept)
    jvp_jaxpr = None

try:  # dead-code analysis of a jaxpr (JAX internals)
    from jax._src.interpreters.partial_eval import dce_jaxpr as _dce_jaxpr

    dce_jaxpr: Any = _dce_jaxpr
except ImportError:  # pragma: no cover (another JAX: every carry leaf is re-run)
    dce_jaxpr = None


Array = jax.Array

# The most pieces a re-run segment is cut into (``width``): the largest power of two with width *
# carry bytes <= WIDTH_BYTES, within [WIDTH_MIN, WIDTH_MAX].
WIDTH_BYTES = 64 * 1024
WIDTH_MIN = 16
WIDTH_MAX = 64
# The forward run's checkpoints (``keep``): as many as fit in KEEP_BYTES, within [WIDTH_MIN,
# KEEP_MAX]. Measured on S2a-grad (11,700 passes of a 100-byte carry): 512 (no re-run) 12.7 ms,
# 256 14.2 ms, 64 14.9 ms; with 100 save times (117 passes per entry) 28.7 ms for each.
KEEP_BYTES = 64 * 1024
# the largest re-run buffer (``width`` carries) allowed to avoid a second level of re-running: twice
# the checkpoint buffer's bound (under vmap every member has its own, so it stays small)
ONE_LEVEL_BYTES = 128 * 1024
KEEP_MAX = 512
# Loop bodies of more equations than this are replayed by the masked replay alone, full segments
# included: one copy of the body's VJP in the program, not two. Measured on this CPU: the two-wall
# ball (RK5 and witnesses, 1,750 equations) jit(grad) 6.0 -> 4.4 s to compile, its run unchanged;
# the S2a-grad pendulum (RK3, 314 equations) would run 33% slower masked (11.1 -> 14.7 ms) and
# compiles in 1.6 s either way: small bodies keep both replays.
ONE_REPLAY_EQNS = 1000
# passes of the segments replayed by a scan's VJP (at most width; 32: 15 ms on S2a-grad, 16: 15.5 ms)
SEGMENT = 32
# the same for a stepping loop run between save times (a few steps each: its last segment, masked,
# is replayed whole at every save time)
SEGMENT_BETWEEN_SAVES = 8
# Loops differentiated in few scalars (the start carry's and consts' leaves with a tangent) are
# differentiated by their Jacobian, one forward run carrying a tangent per scalar, in reverse mode as
# in forward mode: no checkpoints, no backward sweep. At most
# JACOBIAN_INPUTS[k] scalars where the differentiable carry has at most JACOBIAN_CARRY[k] scalars.
# Measured on this 2-core CPU (RK3, a system of n states whose dynamics read k parameters,
# jax.grad in the k parameters over the forward run's time; the adjoint's 2.7-4.1x for any k):
# n = 2: k = 1 1.5x, 4 2.2x, 8 3.6x, 16 5.2x; n = 20: k = 1 1.6x, 4 3.4x, 8 5.4x; n = 200: k = 1
# 1.6x, 2 2.1x, 4 3.2x (the adjoint 2.9x); the gradient's compile 0.4-0.5 s against 1.5-2.0 s.
JACOBIAN_CARRY = (16, 64, None)
JACOBIAN_INPUTS = (8, 4, 2)
# The same for a stepping loop run between save times (once per save time, inside the saving loop's
# scan): the adjoint of each such run pays a fixed price (its checkpoint buffers, a masked replay of a
# whole segment for the few steps between two save times), about 0.1 ms a save time on this CPU
# whatever the run's length, which the Jacobian does not. Measured (RK5 1e-8, 30 save times,
# jax.grad of a loss on the saved states; by the Jacobian vs by the adjoint): 5 states, 35 inputs,
# carry 10: to t = 3 0.38 vs 4.4 ms, to t = 300 15.7 vs 16.5 ms; 8 states, 32 inputs, carry 16, to
# t = 300: 14.7 vs 16.7 ms; 12 states, 28 inputs, carry 24: to t = 3 0.61 vs 4.6 ms, to t = 300 32.6
# vs 18.4 ms (long runs of larger carries favour the adjoint); the gradient's first call (compile
# included) 1.2-1.4 s against 2.9-3.5 s. The carry's size counts the carry leaves that are inputs:
# with dense output (4 states, 24 inputs, 44 carried scalars of which 36 the interpolated step's),
# to t = 3 0.42 vs 4.6 ms, to t = 300 17.6 vs 17.8 ms.
JACOBIAN_INPUTS_BETWEEN_SAVES = (40, 16, 4)


def _is_inexact(x: Any) -> bool:
    return jnp.issubdtype(jnp.result_type(x), jnp.inexact)


class LoopSpec:
    """The static description of one differentiated loop (a primitive parameter, hashed by
    identity): closure-converted ``body(c, *consts) -> c`` and ``cond(c, *cond_consts) -> bool``, the
    carry's tree, which carry leaves and consts are differentiable, the pass bound and the depth of
    the re-run levels."""

    def __init__(
        self,
        body: Callable[..., Any],
        cond: Callable[..., Any],
        c0: Any,
        n_bc: int,
        n_cc: int,
        max_steps: int,
        between_saves: bool = False,
    ) -> None:
        leaves, self.tree = jax.tree_util.tree_flatten(c0)
        self.n_c = len(leaves)
        self.n_bc = n_bc
        self.n_cc = n_cc
        self.body = body
        self.cond = cond
        self.max_steps = max_steps
        # (set by analysed)
        self.guarded = False
        self.eqns = 0
        self.one_replay = False
        self.between_saves = between_saves
        self.c_diff: list[int] = []
        self.c_in: list[int] = []
        self.c_live: list[int] = []
        self.bc_diff: list[int] = []
        carry_bytes = sum(int(np.prod(jnp.shape(x))) * jnp.result_type(x).itemsize for x in leaves)
        self.width = WIDTH_MIN
        while self.width < WIDTH_MAX and 2 * self.width * carry_bytes <= WIDTH_BYTES:
            self.width *= 2
        self.segment = min(self.width, SEGMENT_BETWEEN_SAVES if between_saves else SEGMENT)
        self.keep = WIDTH_MIN
        while self.keep < KEEP_MAX and 2 * self.keep * carry_bytes <= KEEP_BYTES:
            self.keep *= 2
        # the same pass bound as the bounded loop (identical values on a run that reaches it)
        self.cap = int(np.prod(bounded_levels(max_steps, carry_bytes)))
        # the largest stride the forward run can reach, and the levels of cutting that bring it to width
        t_max = self.segment * _next_pow2_int(-(-self.cap // (self.keep * self.segment)))
        # one level of re-running where its buffer stays small: each level is one more copy of the
        # loop's body in the compiled program (compile time of a gradient through a hybrid system:
        # issue #40 item 5)
        if t_max > self.segment * self.width and (t_max // self.segment) * carry_bytes <= ONE_LEVEL_BYTES:
            self.width = t_max // self.segment
        depth = 0
        while self.segment * self.width**depth < t_max:
            depth += 1
        self.depth = depth
        self.n_res = 2 * self.n_c + self.n_bc + n_cc + 2

    def analysed(self, cl: list[Array], bc: list[Array], c_nonzero: list[bool], bc_nonzero: list[bool]) -> LoopSpec:
        """This loop with what its adjoint sweeps, for tangents nonzero where ``c_nonzero`` (carry
        leaves) and ``bc_nonzero`` (consts) say: the consts with a tangent, and the carry leaves whose
        tangent can be nonzero (those with one at the start, and, to a fixed point, those a pass gives
        one from them and the consts). The others (step sizes under stop_gradient, counters) are not
        carried by the adjoint."""
        spec = copy.copy(self)
        jaxpr = jax.make_jaxpr(self.step)(cl, bc)
        spec.guarded = _has_side_effects(jaxpr)
        spec.eqns = count_eqns(jaxpr.jaxpr)
        spec.one_replay = spec.eqns > ONE_REPLAY_EQNS
        spec.bc_diff = [i for i, x in enumerate(bc) if bc_nonzero[i] and _is_inexact(x)]
        inexact = [_is_inexact(x) for x in cl]
        nz = [z and e for z, e in zip(c_nonzero, inexact)]
        bc_nz = [i in spec.bc_diff for i in range(len(bc))]
        if jvp_jaxpr is None:
            nz = inexact
        while jvp_jaxpr is not None:
            _, out_nz = jvp_jaxpr(jaxpr, nz + bc_nz, instantiate=False)
            new = [a or (b and e) for a, b, e in zip(nz, out_nz, inexact)]
            if new == nz:
                break
            nz = new
        spec.c_diff = [i for i, z in enumerate(nz) if z]
        spec.c_in = [i for i in spec.c_diff if c_nonzero[i]]
        # the carry leaves the swept ones depend on, to a fixed point over passes (the others, such
        # as statistics, need not be re-run: JAX's own analysis drops them from the replay)
        live = [i in spec.c_diff for i in range(self.n_c)]
        while dce_jaxpr is not None:
            _, used = dce_jaxpr(jaxpr.jaxpr, live, instantiate=False)
            new = [a or b for a, b in zip(live, used[: self.n_c])]
            if new == live:
                break
            live = new
        spec.c_live = [i for i, z in enumerate(live) if z or dce_jaxpr is None]
        return spec

    def __repr__(self) -> str:
        return (
            f"LoopSpec(keep={self.keep}, width={self.width}, segment={self.segment}, depth={self.depth}, "
            f"cap={self.cap})"
        )

    # ----- flat helpers ------------------------------------------------------------------------------
    def step(self, cl: list[Array], bcl: list[Array]) -> list[Array]:
        c = jax.tree_util.tree_unflatten(self.tree, cl)
        return jax.tree_util.tree_leaves(self.body(c, *bcl))

    def going(self, cl: list[Array], ccl: list[Array]) -> Array:
        return self.cond(jax.tree_util.tree_unflatten(self.tree, cl), *ccl)

    def split_res(self, args: list[Any]) -> tuple[Any, ...]:
        n_c, n_bc, n_cc = self.n_c, self.n_bc, self.n_cc
        cl = list(args[:n_c])
        bcl = list(args[n_c : n_c + n_bc])
        ccl = list(args[n_c + n_bc : n_c + n_bc + n_cc])
        bufs = list(args[n_c + n_bc + n_cc : 2 * n_c + n_bc + n_cc])
        n, t = args[2 * n_c + n_bc + n_cc], args[2 * n_c + n_bc + n_cc + 1]
        return cl, bcl, ccl, bufs, n, t

    def diff_of(self, cl: list[Any], bcl: list[Any]) -> list[Any]:
        return [cl[i] for i in self.c_diff] + [bcl[i] for i in self.bc_diff]

    def with_diff(self, cl: list[Any], bcl: list[Any], d: list[Any]) -> tuple[list[Any], list[Any]]:
        cl, bcl = list(cl), list(bcl)
        nd = len(self.c_diff)
        for i, v in zip(self.c_diff, d[:nd]):
            cl[i] = v
        for i, v in zip(self.bc_diff, d[nd:]):
            bcl[i] = v
        return cl, bcl

    # ----- the loops ---------------------------------------------------------------------------------
    def plain(self, cl: list[Array], bcl: list[Array], ccl: list[Array]) -> list[Array]:
        """The loop (at most ``cap`` passes), for the forward sensitivity."""

        def cond(s: Any) -> Any:
            return (s[1] < self.cap) & self.going(s[0], ccl)

        def body(s: Any) -> Any:
            return self.step(s[0], bcl), s[1] + 1

        return jax.lax.while_loop(cond, body, (cl, jnp.zeros((), jnp.int32)))[0]

    def bounded(self, cl: list[Array], bcl: list[Array], ccl: list[Array]) -> list[Array]:
        """The same loop as `bounded_while` (differentiable to any order)."""

        def cond(c: Any) -> Any:
            return self.going(jax.tree_util.tree_leaves(c), ccl)

        def body(c: Any) -> Any:
            return self.step(list(c), bcl)

        return list(bounded_while(cond, body, list(cl), self.max_steps))

    def checkpointed(self, cl: list[Array], bcl: list[Array], ccl: list[Array]) -> tuple[Any, ...]:
        """The loop, keeping every ``T``-th carry in a buffer of ``keep`` (``T`` doubles, every other
        checkpoint dropped, when the buffer is full): ``(final carry, passes, buffers, T)``; the
        checkpoint of pass ``k * T`` is in slot `slot` ``(T, k)``.

        One loop of chunks of ``T`` passes, a checkpoint per chunk, no test or write per pass (a
        conditional per pass costs more than a small system's step). Thinning moves nothing: the
        checkpoints kept stay in their slots and the new ones take the slots of those dropped (a
        conditional or a select of the buffers per chunk copies them: 0.8 ms of S2a-grad's 3.7 ms
        forward run), so the loop's body is in the program once (compile time, issue #40 item 5)."""
        bufs0 = [jnp.zeros((self.keep, *jnp.shape(x)), jnp.result_type(x)) for x in cl]

        def going(cl: list[Array], n: Array) -> Array:
            return (n < self.cap) & self.going(cl, ccl)

        def chunk(s: Any) -> Any:
            cl, n, bufs, t, j = s
            full = j == self.keep
            t = jnp.where(full, 2 * t, t)
            j = jnp.where(full, self.keep // 2, j)
            at = self.slot(t, j)
            bufs = [_put(b, at, x) for b, x in zip(bufs, cl)]
            end = n + t

            def cond(s: Any) -> Any:
                return (s[1] < end) & going(s[0], s[1])

            def body(s: Any) -> Any:
                return self.step(s[0], bcl), s[1] + 1

            cl, n = jax.lax.while_loop(cond, body, (cl, n))
            return cl, n, bufs, t, j + 1

        init = (
            list(cl),
            jnp.zeros((), jnp.int32),
            bufs0,
            jnp.asarray(self.segment, jnp.int32),
            jnp.zeros((), jnp.int32),
        )
        cl, n, bufs, t, _ = jax.lax.while_loop(lambda s: going(s[0], s[1]), chunk, init)
        return cl, n, bufs, t

    def slot(self, t: Array, k: Array) -> Array:
        """The buffer slot of checkpoint ``k`` (pass ``k * t``) while checkpoints are ``t`` passes
        apart: each thinning keeps the even checkpoints where they are (checkpoint ``i`` of the
        thinner spacing was ``2 i``) and gives the new ones (``i >= keep / 2``) the slots of the odd
        ones dropped (``2 (i - keep / 2) + 1``)."""
        half = self.keep // 2
        levels = max(1, int(np.ceil(np.log2(max(self.cap // (self.keep * self.segment), 1)))) + 1)
        for lv in range(levels, 0, -1):  # from the thinnest spacing down to the first
            deeper = t >= self.segment * 2**lv
            k = jnp.where(deeper, jnp.where(k < half, 2 * k, 2 * (k - half) + 1), k)
        return k

    def replay_any(
        self, start: list[Array], length: Array, ct: list[Array], bcl: list[Array], sweep: Array | None = None
    ) -> Any:
        """`replay` of a segment, full or not (a conditional: under ``vmap``, full only when
        every member's is; a body larger than ``ONE_REPLAY_EQNS`` always by the masked replay)."""
        if self.one_replay:
            return self.replay(start, length, ct, bcl, sweep, masked=True)
        return jax.lax.cond(
            eqxi.unvmap_all(length == self.segment),
            lambda a: self.replay(a[0], a[1], a[2], a[3], a[4], masked=False),
            lambda a: self.replay(a[0], a[1], a[2], a[3], a[4], masked=True),
            (start, length, ct, bcl, sweep),
        )

    def replay(
        self,
        start: list[Array],
        length: Array,
        ct: list[Array],
        bcl: list[Array],
        sweep: Array | None = None,
        masked: bool = True,
    ) -> Any:
        """The VJP of one segment of at most ``segment`` passes from the carry ``start``: a scan of
        ``segment`` passes whose JAX VJP stores every pass's residuals (measured 1.5-2x faster than a
        VJP per pass in a loop, which recomputes each pass). ``masked=False``: a full segment, its
        passes as they are; otherwise the passes from ``length`` on are computed from the first carry
        and discarded by a select (skipped by a conditional, for bodies with side effects), which costs
        ~20% of a small system's reverse pass. Returns ``(ct at start, ct of the consts, the carry
        after the segment's passes)`` (of that carry, the leaves the swept ones depend on: the
        others, say statistics, are left out, as JAX leaves them out of the replay): the last lets
        the replay re-run a segment forward (`adjoint`), so that the program holds no other copy of
        the loop's body for re-running. ``sweep`` False: only re-run (the backward pass skipped)."""
        nd = len(self.c_diff)

        def segment(d: list[Array]) -> tuple[list[Array], list[Array]]:
            c0, b = self.with_diff(start, bcl, d)

            def one(c: list[Array], i: Array) -> tuple[list[Array], None]:
                if not masked:
                    return self.step(c, b), None
                go = i < length
                arg = [jnp.where(go, x, x0) for x, x0 in zip(c, c0)]
                if self.guarded:
                    new = jax.lax.cond(eqxi.unvmap_any(go), lambda a: self.step(a, b), lambda a: a, arg)
                else:
                    new = self.step(arg, b)
                return [jnp.where(go, y, x) for y, x in zip(new, c)], None

            out = jax.lax.scan(one, c0, jnp.arange(self.segment))[0]
            return [out[i] for i in self.c_diff], [out[i] for i in self.c_live]

        d = self.diff_of(start, bcl)
        _, vjp, end = jax.vjp(segment, d, has_aux=True)
        if sweep is None:
            (cts,) = vjp(list(ct))
        else:  # (a segment only re-run skips its backward pass; under vmap, when every member's is)
            cts = jax.lax.cond(
                eqxi.unvmap_any(sweep), lambda v, c: v(c)[0], lambda v, c: [jnp.zeros_like(x) for x in d], vjp, list(ct)
            )
        return cts[:nd], cts[nd:], end

    def adjoint(self, res: list[Array], ct: list[Array]) -> list[Array]:
        """The discrete adjoint: ``ct`` on the final carry's differentiable leaves -> cotangents of
        the start carry's and the consts' differentiable leaves.

        One loop, from the run's end, of one replay (`replay_any`) a pass: the forward run's blocks
        of ``T`` passes are taken from the last; a block is first re-run, a segment at a time, to
        checkpoint the starts of its segments (in a buffer of ``width`` carries), then its segments
        are swept from its last. Re-running goes through the same replay as the sweep (its
        backward pass skipped, the carry at its end kept): so the program holds one copy of the loop's
        body for the adjoint, not a second one for re-running (the two-wall ball, RK5 and two
        witnesses: ``jit(grad)`` 5.7 -> 4.6 s to compile on this 2-core CPU, ``jit(vmap(grad))``
        8.9 -> 7.0 s). A re-run segment costs a replay rather than a forward pass, but only runs
        of more than ``keep * segment`` passes (16,384 for a small carry) re-run at all; below
        that, ``T`` is ``segment`` and every pass of the loop is a sweep of the forward run's own
        segments, the last one masked. Under ``vmap`` each member follows its own blocks. Loops of
        two or more levels of re-running: `adjoint_levels` (the same, with bookkeeping between passes)."""
        if self.depth > 1:
            return self.adjoint_levels(res, ct)
        cl, bcl, _, bufs, n, t = self.split_res(res)
        seg = self.segment
        spare = self.width  # the slot that takes the carries no one reads
        n_blocks = -(-n // t)

        def block(k: Array) -> tuple[Array, Array]:
            """Forward block ``k``'s number of passes and of segments."""
            length = jnp.minimum(t, n - k * t)
            return length, -(-length // seg)

        def enter(k: Array, cps: list[Array], go: Any) -> tuple[list[Array], Array]:
            """Where ``go``: ``cps`` holding block ``k``'s first carry (its other segments' starts
            still to re-run), and the index of its last segment."""
            k = jnp.maximum(k, 0)
            at = jnp.where(go, 0, spare)
            sk = self.slot(t, k)  # (once: a slot is a few dozen operations)
            cps = [_put(c, at, b[sk]) for c, b in zip(cps, bufs)]
            return cps, block(k)[1] - 1

        cps0 = [jnp.zeros((self.width + 1, *jnp.shape(x)), jnp.result_type(x)) for x in cl]
        k0 = n_blocks - 1
        cps0, i0 = enter(k0, cps0, True)
        g0 = [jnp.zeros_like(bcl[i]) for i in self.bc_diff]
        one = jnp.ones((), jnp.int32)

        def body(s: Any) -> Any:
            # r: the segments of block k whose first carries are in cps; i: the next to sweep
            k, r, i, cps, ct, g = s
            length, segments = block(k)
            rerun = r < segments
            j = jnp.where(rerun, r - 1, i)
            run = jnp.where(rerun, seg, jnp.minimum(seg, length - i * seg))
            ct_out, gi, end = self.replay_any([c[j] for c in cps], run, ct, bcl, ~rerun)
            at = jnp.where(rerun, r, spare)
            cps = list(cps)
            for i_live, e in zip(self.c_live, end):
                cps[i_live] = _put(cps[i_live], at, e)
            ct = [jnp.where(rerun, a, b) for a, b in zip(ct, ct_out)]
            g = [jnp.where(rerun, a, a + b) for a, b in zip(g, gi)]
            i = jnp.where(rerun, i, i - 1)
            done = i < 0
            k = jnp.where(done, k - 1, k)
            cps, i_next = enter(k, cps, done)
            return k, jnp.where(done, one, jnp.where(rerun, r + 1, r)), jnp.where(done, i_next, i), cps, ct, g

        _, _, _, _, ct, g = jax.lax.while_loop(lambda s: s[0] >= 0, body, (k0, one, i0, cps0, list(ct), g0))
        return [*ct, *g]

    def adjoint_levels(self, res: list[Array], ct: list[Array]) -> list[Array]:
        """`adjoint` for loops of two or more levels of re-running (large carries, long bounds): a
        block of the forward run is cut into at most ``width`` pieces, each piece again, down to
        segments, the pieces' first carries re-run (from the level above's) and kept in a buffer
        of ``width`` carries per level; the segments are swept from the last.

        The recursion is one loop of one replay a pass, as in `adjoint`: a pass either re-runs a
        segment forward (the replay with its backward pass skipped; a piece's first carry kept when
        it is reached) or sweeps one; between two passes a small loop without the body does the
        bookkeeping (entering the next block, descending into the next piece, climbing back when a
        piece is swept). So the program holds one copy of the body for the adjoint whatever the
        number of levels (300 leaves of distinct classes, three levels: ``jit(grad)`` 11.0 -> 9.8 s to
        compile; a body as small as the 300-lag chain's: unchanged, and its gradient ~3 % slower to
        run for the bookkeeping)."""
        cl, bcl, _, bufs, n, t = self.split_res(res)
        seg, w, depth = self.segment, self.width, self.depth
        n_blocks = -(-n // t)
        limits = jnp.asarray([w ** (depth - lv) for lv in range(1, depth + 1)], jnp.int32)
        i32 = jnp.int32

        def cut(li: Array, length: Array) -> tuple[Array, Array]:
            """(stride, pieces) of a stretch of ``length`` passes at level ``li + 1``: at most
            ``width`` pieces of ``segment * 2^q`` passes, short enough for the levels below."""
            need = -(-length // (seg * w))
            q = jnp.ones_like(need)
            for _ in range(int(np.log2(w ** (depth - 1)))):
                q = jnp.where((q < need) & (q < limits[li]), 2 * q, q)
            stride = seg * q
            return stride, -(-length // stride)

        def row(b: Array, li: Array, si: Array) -> Array:
            return jax.lax.dynamic_index_in_dim(jax.lax.dynamic_index_in_dim(b, li, 0, False), si, 0, False)

        def put(b: Array, li: Array, si: Array, x: Array) -> Array:
            idx = (jnp.asarray(li, jnp.int32), jnp.asarray(si, jnp.int32), *([jnp.zeros((), jnp.int32)] * jnp.ndim(x)))
            return jax.lax.dynamic_update_slice(b, x[None, None], idx)

        # per level (index = level - 1): the stretch's length, stride, pieces, pieces whose first
        # carries are known, the next piece to take; the buffers of first carries (slot ``width``:
        # the writes no one reads)
        levels0 = tuple(jnp.zeros((depth,), i32) for _ in range(5))
        cps0 = [jnp.zeros((depth, w + 1, *jnp.shape(x)), jnp.result_type(x)) for x in cl]
        g0 = [jnp.zeros_like(bcl[i]) for i in self.bc_diff]

        def done(s: Any) -> Array:
            return (s[0] == 0) & (s[1] < 0)

        def wants_replay(s: Any) -> Array:
            lv, _, (_, _, pieces, known, nxt), *_ = s
            li = jnp.maximum(lv - 1, 0)
            return (lv > 0) & ((known[li] < pieces[li]) | ((lv == depth) & (nxt[li] >= 0)))

        def bookkeeping(s: Any) -> Any:
            """Enter the next block (level 0), descend into the next piece, or climb back."""
            lv, k, (length, stride, pieces, known, nxt), cps, cur, pos, ct, g = s
            li = jnp.maximum(lv - 1, 0)
            enter = lv == 0
            descend = ~enter & (nxt[li] >= 0)  # (every first carry known: else a replay is due)
            climb = ~enter & ~descend
            kk = jnp.maximum(k, 0)
            sk = self.slot(t, kk)
            ni = jnp.maximum(nxt[li], 0)
            # the new stretch (entered or descended into): its level index, first carry and length
            new_li = jnp.where(enter, 0, jnp.minimum(lv, depth - 1))
            first = [jnp.where(enter, b[sk], row(c, li, ni)) for b, c in zip(bufs, cps)]
            piece_len = jnp.minimum(stride[li], length[li] - ni * stride[li])
            new_len = jnp.where(enter, jnp.minimum(t, n - kk * t), piece_len)
            new_stride, new_pieces = cut(new_li, new_len)
            opening = enter | descend
            at = jnp.where(opening, 0, w)
            cps = [put(c, new_li, at, x) for c, x in zip(cps, first)]

            def set_(a: Array, v: Array) -> Array:
                return jnp.where(opening, a.at[new_li].set(v), a)

            nxt = jnp.where(descend, nxt.at[li].add(-1), nxt)
            length, stride, pieces = set_(length, new_len), set_(stride, new_stride), set_(pieces, new_pieces)
            known, nxt = set_(known, jnp.ones((), i32)), set_(nxt, new_pieces - 1)
            cur = [jnp.where(opening, x, c) for x, c in zip(first, cur)]
            pos = jnp.where(opening, 0, pos)
            lv = jnp.where(opening, new_li + 1, lv - 1)
            k = jnp.where(climb & (lv == 0), k - 1, k)
            return lv, k, (length, stride, pieces, known, nxt), cps, cur, pos, ct, g

        def settle(s: Any) -> Any:
            return jax.lax.while_loop(lambda s: ~wants_replay(s) & ~done(s), bookkeeping, s)

        def body(s: Any) -> Any:
            lv, k, (length, stride, pieces, known, nxt), cps, cur, pos, ct, g = s
            li = jnp.maximum(lv - 1, 0)
            rerun = known[li] < pieces[li]
            sweep = ~rerun
            ni = jnp.maximum(nxt[li], 0)
            start = [jnp.where(rerun, c, row(b, li, ni)) for c, b in zip(cur, cps)]
            run = jnp.where(rerun, seg, jnp.minimum(seg, length[li] - ni * seg))
            ct_out, gi, end = self.replay_any(start, run, ct, bcl, sweep)
            cur = list(cur)
            for j, e in zip(self.c_live, end):
                cur[j] = jnp.where(rerun, e, cur[j])
            pos = jnp.where(rerun, pos + seg, pos)
            reached = rerun & (pos == stride[li])
            at = jnp.where(reached, known[li], w)
            cps = [put(b, li, at, c) for b, c in zip(cps, cur)]
            known = jnp.where(reached, known.at[li].add(1), known)
            pos = jnp.where(reached, 0, pos)
            nxt = jnp.where(sweep, nxt.at[li].add(-1), nxt)
            ct = [jnp.where(sweep, b, a) for a, b in zip(ct, ct_out)]
            g = [jnp.where(sweep, a + b, a) for a, b in zip(g, gi)]
            return settle((lv, k, (length, stride, pieces, known, nxt), cps, cur, pos, ct, g))

        s0 = settle((jnp.zeros((), i32), n_blocks - 1, levels0, cps0, list(cl), jnp.zeros((), i32), list(ct), g0))
        s = jax.lax.while_loop(lambda s: ~done(s), body, s0)
        return [*s[6], *s[7]]

    def tangent(self, res: list[Array], lin: list[Array]) -> list[Array]:
        """The forward sensitivity: tangents of the start carry's and the consts' differentiable
        leaves -> tangent of the final carry's."""
        cl, bcl, ccl, _, _, _ = self.split_res(res)
        return self.value_and_tangent(cl, bcl, ccl, lin)[1]

    def value_and_tangent(
        self, cl: list[Array], bcl: list[Array], ccl: list[Array], lin: list[Array]
    ) -> tuple[list[Array], list[Array]]:
        """The plain loop's JVP from ``cl``: its final carry, and the tangents of its differentiable
        leaves from those of the start carry's and the consts' (``lin``); one loop."""

        def f(d: list[Array]) -> list[Array]:
            c, b = self.with_diff(cl, bcl, d)
            return self.plain(c, b, ccl)

        out, d_out = jax.jvp(f, (self.diff_of(cl, bcl),), (list(lin),))
        return out, [d_out[i] for i in self.c_diff]

    # second order: through the bounded loop
    def bounded_diff(self, res: list[Array], d: list[Array]) -> list[Array]:
        cl, bcl, ccl, _, _, _ = self.split_res(res)
        c, b = self.with_diff(cl, bcl, d)
        out = self.bounded(c, b, ccl)
        return [out[i] for i in self.c_diff]

    def res_diff(self, res: list[Any]) -> list[Any]:
        cl, bcl, _, _, _, _ = self.split_res(res)
        return self.diff_of(cl, bcl)

    def tangent_avals(self, res: list[Any]) -> list[Any]:
        """The avals of ``loop_tangent``'s outputs: the final carry's differentiable leaves."""
        return [_aval(res[i]) for i in self.c_diff]


def count_eqns(jaxpr: Any) -> int:
    """The number of equations of ``jaxpr``, those of its sub-jaxprs (loop bodies, branches) included."""
    n = 0
    for eqn in jaxpr.eqns:
        n += 1
        for p in eqn.params.values():
            for sub in p if isinstance(p, (list, tuple)) else (p,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    n += count_eqns(inner)
    return n


def _put(buf: Array, i: Any, x: Array) -> Array:
    """``buf`` with row ``i`` set to ``x`` (``i`` in bounds): a plain dynamic update, without the
    bounds guard of ``buf.at[i].set(x)``."""
    return jax.lax.dynamic_update_index_in_dim(buf, x, i, 0)


def _next_pow2_int(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _next_pow2(n: Array, limit: int) -> Array:
    """The smallest power of two >= ``n`` (a traced int), at most ``limit``."""
    p = jnp.ones_like(n)
    for _ in range(max(0, int(np.log2(max(limit, 1))))):
        p = jnp.where(p < n, 2 * p, p)
    return p


def _is_zero(x: Any) -> bool:
    """A symbolic zero (``None`` where equinox's batching rules carry one across ``vmap``)."""
    return x is None or type(x) is ad.Zero


def _zeros(x: Any, aval: Any) -> Any:
    return jnp.zeros(aval.shape, aval.dtype) if _is_zero(x) else x


def _aval(x: Any) -> Any:
    return jax.core.ShapedArray(jnp.shape(x), jnp.result_type(x))


# ----- loop_tangent: (res, dc0, dconsts) -> dc_n --------------------------------------------------
def _tangent_impl(*args: Any, spec: LoopSpec) -> list[Array]:
    return spec.tangent(list(args[: spec.n_res]), list(args[spec.n_res :]))


def _tangent_abstract(*args: Any, spec: LoopSpec) -> list[Any]:
    return spec.tangent_avals(list(args[: spec.n_res]))


def _linear_jvp(primitive: Callable[[], Any], second_order: Callable[..., list[Array]]) -> Callable[..., Any]:
    """The JVP rule of a primitive linear in its last arguments ``x`` (the tangent or cotangent
    moved through the loop): the primitive itself on their tangents while the residuals' start carry
    and consts have none; otherwise (second order) the JVP of ``second_order(spec, res, core, x)``,
    the same map through the bounded loop, in ``core`` (start carry and consts) and ``x``."""

    def rule(primals: Any, tangents: Any, *, spec: LoopSpec) -> Any:
        prim = primitive()  # (defined below, with this rule)
        res, x = list(primals[: spec.n_res]), list(primals[spec.n_res :])
        dres, dx = list(tangents[: spec.n_res]), list(tangents[spec.n_res :])
        out = prim.bind(*primals, spec=spec)
        dx = [_zeros(t, _aval(v)) for t, v in zip(dx, x)]
        d_core = spec.res_diff(dres)
        if all(_is_zero(t) for t in d_core):
            return out, prim.bind(*res, *dx, spec=spec)
        core = spec.res_diff(res)
        d_core = [_zeros(t, _aval(v)) for t, v in zip(d_core, core)]

        def f(core: list[Array], x: list[Array]) -> list[Array]:
            return second_order(spec, _with_res_diff(spec, res, core), core, x)

        return out, jax.jvp(f, (core, x), (d_core, dx))[1]

    return rule


def _bounded_tangent(spec: LoopSpec, res: list[Array], core: list[Array], lin: list[Array]) -> list[Array]:
    return jax.jvp(lambda d: spec.bounded_diff(res, d), (core,), (lin,))[1]


def _bounded_adjoint(spec: LoopSpec, res: list[Array], core: list[Array], ct: list[Array]) -> list[Array]:
    _, vjp = jax.vjp(lambda d: spec.bounded_diff(res, d), core)
    return list(vjp(ct)[0])


def _tangent_transpose(cts: Any, *args: Any, spec: LoopSpec) -> list[Any]:
    res = list(args[: spec.n_res])
    lin = args[spec.n_res :]
    assert not any(ad.is_undefined_primal(x) for x in res)
    cts = [_zeros(ct, a) for ct, a in zip(cts, spec.tangent_avals(res))]
    out = loop_adjoint_p.bind(*res, *cts, spec=spec)
    # (linear arguments known at transposition, zero tangents materialized, take no cotangent)
    return [None] * spec.n_res + [o if ad.is_undefined_primal(x) else None for o, x in zip(out, lin)]


# ----- loop_adjoint: (res, ct_n) -> (ct_c0, ct_consts) ---------------------------------------------
def _adjoint_impl(*args: Any, spec: LoopSpec) -> list[Array]:
    return spec.adjoint(list(args[: spec.n_res]), list(args[spec.n_res :]))


def _adjoint_abstract(*args: Any, spec: LoopSpec) -> list[Any]:
    return [_aval(x) for x in spec.res_diff(list(args[: spec.n_res]))]


def _adjoint_transpose(cts: Any, *args: Any, spec: LoopSpec) -> list[Any]:
    res = list(args[: spec.n_res])
    ct = args[spec.n_res :]
    assert not any(ad.is_undefined_primal(x) for x in res)
    core = spec.res_diff(res)
    cts = [_zeros(c, _aval(x)) for c, x in zip(cts, core)]
    out = loop_tangent_p.bind(*res, *cts, spec=spec)
    return [None] * spec.n_res + [o if ad.is_undefined_primal(x) else None for o, x in zip(out, ct)]


def _with_res_diff(spec: LoopSpec, res: list[Any], core: list[Any]) -> list[Any]:
    cl, bcl, ccl, bufs, n, t = spec.split_res(res)
    cl, bcl = spec.with_diff(cl, bcl, core)
    return [*cl, *bcl, *ccl, *bufs, n, t]


loop_tangent_p: Any = eqxi.create_vprim(
    "jaxsys_loop_tangent",
    _tangent_impl,
    _tangent_abstract,
    _linear_jvp(lambda: loop_tangent_p, _bounded_tangent),
    _tangent_transpose,
)
loop_adjoint_p: Any = eqxi.create_vprim(
    "jaxsys_loop_adjoint",
    _adjoint_impl,
    _adjoint_abstract,
    _linear_jvp(lambda: loop_adjoint_p, _bounded_adjoint),
    _adjoint_transpose,
)


# ----- loop_value_tangent: (c0, consts, cond consts, lin) -> (c_n, dc_n) -----------------------------
# A loop's JVP by the sweep: reverse mode needs the value from the checkpointing forward run (computed
# without the tangents; its checkpoints feed the adjoint) and the tangent from `loop_tangent` (a replay
# carrying the tangents beside the values, transposed into the adjoint). Forward mode (``jax.jvp``,
# ``jax.jacfwd``) needs only the replay, values included: running the checkpointing run as well cost
# 2.7x the tangent's time on tests/test_event_gradients.py's hybrid system. The ``custom_jvp`` rule
# cannot tell the two apart (JAX traces a rule to a jaxpr once and evaluates it under whichever
# transformation applies it); this primitive's rules can. Evaluated, it is the replay alone;
# partially evaluated (``jax.grad``, ``jax.linearize``, ``jax.checkpoint``'s rematerialization), the
# checkpointing run (known) and `loop_tangent` (staged); differentiated again, that pair's JVP.
def _vt_split(args: Any, spec: LoopSpec) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    n_c, n_bc, n_cc = spec.n_c, spec.n_bc, spec.n_cc
    args = list(args)
    return args[:n_c], args[n_c : n_c + n_bc], args[n_c + n_bc : n_c + n_bc + n_cc], args[n_c + n_bc + n_cc :]


def _vt_fused(*args: Any, spec: LoopSpec) -> list[Array]:
    """One loop: the plain loop's JVP, its value and the differentiable leaves' tangents."""
    out, d_out = spec.value_and_tangent(*_vt_split(args, spec))
    return [*out, *d_out]


def _vt_known(*args: Any, spec: LoopSpec) -> list[Array]:
    """``(c0, consts, cond consts) -> (c_n, *checkpoints, passes, stride)``: the checkpointing run."""
    n_prim = spec.n_c + spec.n_bc + spec.n_cc
    cl, bcl, ccl, _ = _vt_split(list(args[:n_prim]), spec)
    out, n, bufs, t = _checkpointed_run(spec)(cl, bcl, ccl)
    return [*out, *bufs, n, t]


def _vt_staged(*args: Any, spec: LoopSpec) -> list[Array]:
    """``(c0, consts, cond consts, *checkpoints, passes, stride, lin) -> dc_n``: `loop_tangent`."""
    n_prim = spec.n_c + spec.n_bc + spec.n_cc
    rest = list(args[n_prim:])
    bufs, n, t, lin = rest[: spec.n_c], rest[spec.n_c], rest[spec.n_c + 1], rest[spec.n_c + 2 :]
    return list(loop_tangent_p.bind(*args[:n_prim], *bufs, n, t, *lin, spec=spec))


def _vt_two_part(*args: Any, spec: LoopSpec) -> list[Array]:
    """The pair partial evaluation keeps, as one map (what a second derivative differentiates)."""
    n_prim = spec.n_c + spec.n_bc + spec.n_cc
    known = _vt_known(*args[:n_prim], spec=spec)
    return [*known[: spec.n_c], *_vt_staged(*args[:n_prim], *known[spec.n_c :], *args[n_prim:], spec=spec)]


def _vt_layered(
    fn: Callable[..., Any], layers: tuple[Any, ...], in_axes_of: Any, out_axes_of: Any
) -> Callable[..., Any]:
    """``fn`` under the ``vmap``s the primitive was batched by (innermost first); per layer, the
    axes of ``fn``'s arguments and outputs from the layer's ``(size, in_axes, out_axes)``."""
    for layer in layers:
        size = layer[0]
        fn = jax.vmap(
            lambda *a, fn=fn: tuple(fn(*a)), in_axes=in_axes_of(layer), out_axes=out_axes_of(layer), axis_size=size
        )
    return fn


def _vt_parts(spec: LoopSpec, layers: tuple[Any, ...]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The checkpointing run and `loop_tangent`, batched as the primitive: the run's checkpoints and
    counts batched as its values (shared when the values are, under ``jax.jacfwd``)."""
    n_prim = spec.n_c + spec.n_bc + spec.n_cc

    def res_axes(layer: Any) -> tuple[Any, ...]:
        return (layer[2][0],) * (spec.n_c + 2)

    known = _vt_layered(
        lambda *a: _vt_known(*a, spec=spec),
        layers,
        lambda layer: layer[1][:n_prim],
        lambda layer: layer[2][: spec.n_c] + res_axes(layer),
    )
    staged = _vt_layered(
        lambda *a: _vt_staged(*a, spec=spec),
        layers,
        lambda layer: layer[1][:n_prim] + res_axes(layer) + layer[1][n_prim:],
        lambda layer: layer[2][spec.n_c :],
    )
    return known, staged


def _vt_impl(*args: Any, spec: LoopSpec, layers: tuple[Any, ...], avals: tuple[Any, ...]) -> list[Array]:
    fn = _vt_layered(lambda *a: _vt_fused(*a, spec=spec), layers, lambda layer: layer[1], lambda layer: layer[2])
    return list(fn(*args))


def _vt_abstract(*args: Any, spec: LoopSpec, layers: tuple[Any, ...], avals: tuple[Any, ...]) -> list[Any]:
    out = list(avals)
    for size, _, out_axes in layers:
        out = [a if ax is None else a.update(shape=(size, *a.shape)) for a, ax in zip(out, out_axes)]
    return out


def _vt_batch(args: Any, dims: Any, *, spec: LoopSpec, layers: tuple[Any, ...], avals: tuple[Any, ...]) -> Any:
    size = next(jnp.shape(a)[d] for a, d in zip(args, dims) if d is not None)
    in_axes = tuple(None if d is None else int(d) for d in dims)
    values_batched = any(a is not None for a in in_axes[: spec.n_c + spec.n_bc + spec.n_cc])
    out_axes = tuple([0 if values_batched else None] * spec.n_c + [0] * (len(avals) - spec.n_c))
    outs = loop_value_tangent_p.bind(*args, spec=spec, layers=(*layers, (size, in_axes, out_axes)), avals=avals)
    return outs, [None if ax is None else 0 for ax in out_axes]


def _vt_jvp(primals: Any, tangents: Any, *, spec: LoopSpec, layers: tuple[Any, ...], avals: tuple[Any, ...]) -> Any:
    # (a second derivative: the pair's, whose rules are the checkpointing run's and loop_tangent's)
    tangents = [ad.instantiate_zeros(t) for t in tangents]
    fn = _vt_layered(lambda *a: _vt_two_part(*a, spec=spec), layers, lambda layer: layer[1], lambda layer: layer[2])
    return jax.jvp(lambda *a: list(fn(*a)), list(primals), tangents)


def _vt_partial_eval(trace: Any, *tracers: Any, spec: LoopSpec, layers: tuple[Any, ...], avals: tuple[Any, ...]) -> Any:
    from jax._src import core

    n_prim = spec.n_c + spec.n_bc + spec.n_cc
    known = [t.pval.is_known() for t in tracers]
    if all(known) or not all(known[:n_prim]):
        params = dict(spec=spec, layers=layers, avals=avals)
        return trace.default_process_primitive(loop_value_tangent_p, tracers, params)
    known_fn, staged_fn = _vt_parts(spec, layers)
    with core.set_current_trace(trace.parent_trace):  # (the checkpointing run: known)
        run = list(known_fn(*(t.pval.get_known() for t in tracers[:n_prim])))
    with core.set_current_trace(trace):  # (loop_tangent: staged, linear in the unknown tangents)
        res = [trace.new_const(x) for x in run[spec.n_c :]]
        tangent = list(staged_fn(*tracers[:n_prim], *res, *tracers[n_prim:]))
    return [*(trace.new_const(v) for v in run[: spec.n_c]), *tangent]


def _vt_partial_eval_custom(saveable: Any, unks_in: Any, inst_in: Any, eqn: Any) -> Any:
    from jax._src import core
    from jax._src.interpreters import partial_eval as pe

    spec, layers = eqn.params["spec"], eqn.params["layers"]
    n_prim = spec.n_c + spec.n_bc + spec.n_cc
    n_out = len(eqn.outvars)
    if not any(unks_in):  # (known: evaluated, its outputs saved)
        return eqn, None, [False] * n_out, [False] * n_out, []
    if any(unks_in[:n_prim]):  # (values depending on the tangents: the whole application staged)
        residuals = [
            v for v, unk, inst in zip(eqn.invars, unks_in, inst_in) if not unk and not inst and type(v) is core.Var
        ]
        return None, eqn, [True] * n_out, [True] * n_out, residuals
    known_fn, staged_fn = _vt_parts(spec, layers)
    prim_in, lin_in = list(eqn.invars[:n_prim]), list(eqn.invars[n_prim:])
    avals = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in eqn.invars]
    closed_known = jax.make_jaxpr(lambda *a: list(known_fn(*a)))(*avals[:n_prim])
    res_vars = [core.Var(a) for a in closed_known.out_avals[spec.n_c :]]
    known = pe.new_jaxpr_eqn(
        prim_in,
        [*eqn.outvars[: spec.n_c], *res_vars],
        core.closed_call_p,
        dict(call_jaxpr=closed_known),
        closed_known.effects,
        eqn.source_info,
        eqn.ctx,
    )
    res_avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in closed_known.out_avals[spec.n_c :]]
    closed_staged = jax.make_jaxpr(lambda *a: list(staged_fn(*a)))(*avals[:n_prim], *res_avals, *avals[n_prim:])
    staged = pe.new_jaxpr_eqn(
        [*prim_in, *res_vars, *lin_in],
        list(eqn.outvars[spec.n_c :]),
        core.closed_call_p,
        dict(call_jaxpr=closed_staged),
        closed_staged.effects,
        eqn.source_info,
        eqn.ctx,
    )
    residuals = [v for v, inst in zip(prim_in, inst_in[:n_prim]) if not inst and type(v) is core.Var] + res_vars
    unks_out = [False] * spec.n_c + [True] * (n_out - spec.n_c)
    inst_out = [False] * spec.n_c + [True] * (n_out - spec.n_c)
    return known, staged, unks_out, inst_out, residuals


def _register_value_tangent() -> Any:
    from jax._src.interpreters import partial_eval as pe
    from jax.extend.core import Primitive
    from jax.interpreters import batching, mlir

    prim = Primitive("jaxsys_loop_value_tangent")
    prim.multiple_results = True
    prim.def_impl(_vt_impl)
    prim.def_abstract_eval(_vt_abstract)
    mlir.register_lowering(prim, mlir.lower_fun(_vt_impl, multiple_results=True))
    batching.primitive_batchers[prim] = _vt_batch
    ad.primitive_jvps[prim] = _vt_jvp
    pe.custom_partial_eval_rules[prim] = _vt_partial_eval
    pe.partial_eval_jaxpr_custom_rules[prim] = _vt_partial_eval_custom
    return prim


loop_value_tangent_p: Any = _register_value_tangent()


def loop_jvp(
    body: Callable[..., Any],
    cond: Callable[..., Any],
    primals: tuple[Any, tuple[Array, ...], tuple[Array, ...]],
    tangents: tuple[Any, tuple[Any, ...], tuple[Any, ...]],
    max_steps: int,
    between_saves: bool = False,
) -> tuple[Any, Any]:
    """The JVP of ``while cond(c, *cc): c = body(c, *bc)`` from ``c0`` (``primals = (c0, bc, cc)``),
    as ``loop_tangent`` (whose transpose is the discrete adjoint): `while_fast_primal`'s
    rule (``tangents`` may hold symbolic zeros). The forward run keeps its checkpoints for the
    adjoint. ``between_saves``: a stepping loop run between save times
    (`JACOBIAN_INPUTS_BETWEEN_SAVES`, `SEGMENT_BETWEEN_SAVES`)."""
    c0, bc, cc = primals
    cl, tree = jax.tree_util.tree_flatten(c0)
    base = LoopSpec(body, cond, c0, len(bc), len(cc), max_steps, between_saves)
    dcl = jax.tree_util.tree_leaves(tangents[0], is_leaf=_is_symbolic_zero)
    dbc = list(tangents[1])
    spec = base.analysed(cl, list(bc), [_nonzero(d) for d in dcl], [_nonzero(d) for d in dbc])
    if spec.c_diff and _by_jacobian(spec, cl, list(bc)):
        out, jac = _jacobian_run(spec)(cl, list(bc), list(cc))
        lin = _jacobian_in(spec, dcl, dbc)
        flat = jnp.concatenate([jnp.ravel(x) for x in lin])
        d_out = [_symbolic_zero(x) for x in cl]
        for i, j in zip(spec.c_diff, jac):
            d_out[i] = jnp.tensordot(flat.astype(j.dtype), j, axes=1, precision=HIGHEST)
        return jax.tree_util.tree_unflatten(tree, out), jax.tree_util.tree_unflatten(tree, d_out)
    if not spec.c_diff:
        out = _checkpointed_run(base)(cl, list(bc), list(cc))[0]
        return jax.tree_util.tree_unflatten(tree, out), jax.tree_util.tree_unflatten(
            tree, [_symbolic_zero(x) for x in cl]
        )
    # (value and tangent by one primitive: the replay alone in forward mode, the checkpointing run and
    # loop_tangent when partially evaluated: loop_value_tangent_p)
    lin = _lin(spec, cl, list(bc), dcl, dbc)
    avals = tuple(_aval(x) for x in cl) + tuple(_aval(cl[i]) for i in spec.c_diff)
    both = loop_value_tangent_p.bind(*cl, *bc, *cc, *lin, spec=spec, layers=(), avals=avals)
    d_out = [_symbolic_zero(x) for x in cl]
    for i, d in zip(spec.c_diff, both[len(cl) :]):
        d_out[i] = d
    return jax.tree_util.tree_unflatten(tree, list(both[: len(cl)])), jax.tree_util.tree_unflatten(tree, d_out)


def _by_jacobian(spec: LoopSpec, cl: list[Array], bc: list[Array]) -> bool:
    """Whether the loop is differentiated by its Jacobian (`JACOBIAN_INPUTS`, or
    `JACOBIAN_INPUTS_BETWEEN_SAVES` for a stepping loop run between save times): few scalars in
    (its start carry's and consts' leaves with a tangent, `_jacobian_in`) for the size of the carry."""
    inputs = _jacobian_in(spec, cl, bc)
    if not all(jnp.issubdtype(jnp.result_type(x), jnp.floating) for x in inputs):
        return False  # (complex inputs: a real basis would miss their imaginary directions)
    n_in = sum(int(np.prod(jnp.shape(x))) for x in inputs)
    # (between save times, the carry leaves that are inputs: dense output's interpolation data,
    # written by every step from stages its tangents compute anyway, adds little to a column's cost)
    n_carry = sum(int(np.prod(jnp.shape(cl[i]))) for i in (spec.c_in if spec.between_saves else spec.c_diff))
    for carry, most in zip(JACOBIAN_CARRY, JACOBIAN_INPUTS_BETWEEN_SAVES if spec.between_saves else JACOBIAN_INPUTS):
        if carry is None or n_carry <= carry:
            return n_in <= most
    return False


def _jacobian_in(spec: LoopSpec, cl: list[Any], bcl: list[Any]) -> list[Any]:
    """Of ``cl`` and ``bcl``, the leaves with a tangent at the start (the Jacobian's inputs)."""
    return [cl[i] for i in spec.c_in] + [bcl[i] for i in spec.bc_diff]


def jacobian_of(
    spec: LoopSpec, fn: Callable[[list[Array], list[Array]], Any], cl: list[Array], bcl: list[Array]
) -> Any:
    """``(fn(cl, bcl), its Jacobian)`` in the leaves of ``cl`` and ``bcl`` with a tangent at the start
    (`_jacobian_in`, flattened in order): the Jacobian as ``fn``'s output tree with a leading axis over
    the inputs. One run of ``fn`` carrying a tangent per input (``vmap`` of its JVP over a basis: the
    values computed once)."""
    d0 = _jacobian_in(spec, cl, bcl)
    offsets = np.cumsum([0, *(int(np.prod(jnp.shape(x))) for x in d0)])
    n_c = len(spec.c_in)

    def g(d: list[Array]) -> Any:
        c, b = list(cl), list(bcl)
        for i, v in zip(spec.c_in, d[:n_c]):
            c[i] = v
        for i, v in zip(spec.bc_diff, d[n_c:]):
            b[i] = v
        return fn(c, b)

    def column(v: Array) -> Any:
        dd = [v[offsets[k] : offsets[k + 1]].reshape(jnp.shape(x)).astype(jnp.result_type(x)) for k, x in enumerate(d0)]
        return jax.jvp(g, (d0,), (dd,))

    return jax.vmap(column, out_axes=(None, 0))(jnp.eye(int(offsets[-1]), dtype=jnp.result_type(*d0)))


def _jacobian_eval(
    spec: LoopSpec, loop: Callable[..., list[Array]], cl: list[Array], bcl: list[Array], ccl: list[Array]
) -> tuple[list[Array], list[Array]]:
    """``(final carry, Jacobian)`` of ``loop`` (`LoopSpec.plain` or `LoopSpec.bounded`) from ``cl``
    (`jacobian_of`): the Jacobian as one array per differentiable final carry leaf, of shape
    ``(inputs, *leaf)``."""
    out, tan = jacobian_of(spec, lambda c, b: loop(c, b, ccl), cl, bcl)
    return out, [tan[i] for i in spec.c_diff]


def _jacobian_run(spec: LoopSpec) -> Callable[..., Any]:
    """`_jacobian_eval` of the plain loop, as a ``custom_jvp`` whose rule differentiates the same
    map through the bounded loop (nested scans): so a second derivative never differentiates a
    ``while_loop`` in reverse mode."""

    @jax.custom_jvp
    def run(cl: list[Array], bcl: list[Array], ccl: list[Array]) -> Any:
        return _jacobian_eval(spec, spec.plain, cl, bcl, ccl)

    def rule(primals: Any, tangents: Any) -> Any:
        return jax.jvp(lambda *a: _jacobian_eval(spec, spec.bounded, *a), primals, tangents)

    run.defjvp(rule)
    return run


def _nonzero(d: Any) -> bool:
    return not _is_symbolic_zero(d) and jnp.result_type(d) != jax.dtypes.float0


def _lin(spec: LoopSpec, cl: list[Array], bc: list[Array], dcl: list[Any], dbc: list[Any]) -> list[Array]:
    """The tangents of the loop's differentiable inputs (`LoopSpec.diff_of`), zeros materialized."""
    lin = [dcl[i] for i in spec.c_diff] + [dbc[i] for i in spec.bc_diff]
    return [
        d if _nonzero(d) else jnp.zeros(jnp.shape(x), jnp.result_type(x)) for d, x in zip(lin, spec.diff_of(cl, bc))
    ]


def _checkpointed_run(base: LoopSpec) -> Callable[..., Any]:
    """``(cl, bc, cc) -> (final carry, passes, checkpoints, T)`` (`LoopSpec.checkpointed`), as a
    ``custom_jvp`` whose rule is this module's: so a derivative of a derivative (second order)
    differentiates the forward run by the same rule, never a ``while_loop`` in reverse mode. The
    checkpoints and counts are given zero tangents: their only user, the adjoint, is differentiated
    in its non-linear arguments through the bounded loop, from the start carry and consts."""

    @jax.custom_jvp
    def run(cl: list[Array], bc: list[Array], cc: list[Array]) -> Any:
        return base.checkpointed(cl, bc, cc)

    def rule(primals: Any, tangents: Any) -> Any:
        cl, bc, cc = primals
        out, n, bufs, t = run(cl, bc, cc)
        d_out = _tangent_of(base, cl, bc, cc, n, bufs, t, list(tangents[0]), list(tangents[1]))
        f0 = np.zeros((), jax.dtypes.float0)
        return (out, n, bufs, t), (d_out, f0, [_zero_tangent(b) for b in bufs], f0)

    run.defjvp(rule, symbolic_zeros=True)
    return run


def _tangent_of(
    base: LoopSpec,
    cl: list[Array],
    bc: list[Array],
    cc: list[Array],
    n: Array,
    bufs: list[Array],
    t: Array,
    dcl: list[Any],
    dbc: list[Any],
    spec: LoopSpec | None = None,
) -> list[Any]:
    """The tangent of the loop's final carry (a list of leaves: ``loop_tangent`` for the leaves
    that can carry one, symbolic zeros for the others, so that an enclosing loop's analysis sees
    them as such) from the start's and the consts' tangents (``spec``: ``base`` analysed for them,
    when already done)."""

    if spec is None:
        spec = base.analysed(cl, bc, [_nonzero(d) for d in dcl], [_nonzero(d) for d in dbc])
    d_out = [_symbolic_zero(x) for x in cl]
    if spec.c_diff:
        lin = _lin(spec, cl, bc, dcl, dbc)
        for i, d in zip(spec.c_diff, loop_tangent_p.bind(*cl, *bc, *cc, *bufs, n, t, *lin, spec=spec)):
            d_out[i] = d
    return d_out


def _zero_tangent(x: Any) -> Any:
    """A zero tangent for ``x``: zeros of its dtype, float0 for integers and booleans."""
    if _is_inexact(x):
        return jnp.zeros(jnp.shape(x), jnp.result_type(x))
    return np.zeros(jnp.shape(x), jax.dtypes.float0)


def _symbolic_zero(x: Any) -> Any:
    """A symbolic zero tangent for ``x`` (a custom_jvp rule may return one)."""
    return jax.custom_derivatives.SymbolicZero(jax.typeof(x).to_tangent_aval())


def _is_symbolic_zero(x: Any) -> bool:
    return isinstance(x, jax.custom_derivatives.SymbolicZero)
