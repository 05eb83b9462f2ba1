"""Reverse mode through a fixed-step scan by Jacobians batched over its steps.

JAX's reverse mode of a ``lax.scan`` runs one step's VJP after another. For a step of thousands of
tiny operations (a MuJoCo plant's vector field: MJX's forward dynamics, four times a step for RK4),
each VJP is mostly the overhead of those operations, paid 1,000 times in sequence. But reverse mode
needs only the step's Jacobian at each step, and the Jacobians do not depend on each other: they
can all be computed at once, by forward mode (``jax.jacfwd``) ``vmap``-ed over the stored states of
the whole run, where every operation works on a batch. The backward sweep is then a product of
small matrices.

`scan_linearized` is a scan that runs as a plain ``lax.scan`` when evaluated (optionally with an
output every ``every`` passes: the saved rows of a run); differentiated, it keeps its carries and
its tangent map is the primitive ``loop_tangent`` of `adjoint` with a `ScanSpec`, whose transpose
(``loop_adjoint``) is that batched sweep. So

* ``jax.jvp`` / ``jax.jacfwd``: the JVP of the plain scan from the start (as JAX's own), plus the
  kept run where the run's values are used too (``jax.jvp``, a ``jax.jacfwd`` of a loss on the
  outputs: one more forward pass, ~1.4x for the acrobot; where only the tangent is used, XLA drops
  the kept run). A primitive with its own partial-evaluation rule (known: the kept run; unknown: the
  tangent) would spare it; not done: under ``vmap`` outside ``grad`` its batched form would need one
  too;
* ``jax.grad`` / ``jax.vjp``: the Jacobians of the step in the differentiable carry leaves and
  consts (``D`` directions), batched over the steps in chunks of at most ``JAC_BYTES``, then the sweep
  (the outputs' VJPs batched over the outputs, added to the sweep where they were taken);
* second order: through the plain scan (JAX differentiates it to any order);
* ``vmap``: the primitives' rules, vmapped.

It is chosen where it pays (measured on this 2-core CPU): the step is large (at least
``MIN_EQNS`` equations), the directions few (``D <= MAX_DIRECTIONS``), the carries fit in
``STORE_BYTES``, and the step has no side effects (it is evaluated again, batched). Otherwise the
scan is differentiated by JAX as it is. ``jax.grad`` through 1,000 RK4 steps of the MJCF acrobot,
with respect to a body mass (D = 4 states + 3 masses), float32: 92 ms by JAX's scan, 33 ms this
way, 4x the 8.4 ms forward run; ``jax.jacfwd`` unchanged, 22 ms; a loss on 100 saved rows,
float64: ``jax.grad`` 90 -> 31 ms (benchmarks S10-grad, ``ab_compare.py``).

Imports: `adjoint` (the primitives), `loops` (closure conversion, packing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .adjoint import (
    LoopSpec,
    _by_jacobian,
    _is_symbolic_zero,
    _jacobian_in,
    _symbolic_zero,
    jacobian_of,
    loop_tangent_p,
)
from .loops import _materialize, closure, closure_and_shape, packed
from .precision import HIGHEST


Array = jax.Array

# Steps of fewer equations than this run their VJPs in sequence fast enough (a pendulum's RK4 step:
# 123; the MJCF acrobot's: 4,604).
MIN_EQNS = 1000
# Differentiable scalars (carry leaves and consts with a tangent) beyond which the step's VJP per step
# is cheaper than D batched JVPs of it.
MAX_DIRECTIONS = 64
# Fewer passes than this gain nothing from batching (and forward mode would pay the extra run).
MIN_LENGTH = 16
# The most bytes of carries kept for the sweep (above: JAX's own scan VJP, which keeps residuals).
STORE_BYTES = 256 * 2**20
# The most bytes of Jacobians computed at once (the sweep goes over chunks of steps).
JAC_BYTES = 16 * 2**20


def _never(*args: Any) -> Array:
    return jnp.zeros((), bool)


def _floating(x: Any) -> bool:
    return bool(jnp.issubdtype(jnp.result_type(x), jnp.floating))


class ScanSpec(LoopSpec):
    """A `LoopSpec` for ``length`` passes of ``body`` (a scan: no condition, no checkpoints), with an
    output ``out(c, *consts)`` after every ``every``-th pass when ``out`` is given. The residuals are
    laid out as a `LoopSpec`'s: the start carry, the consts, no condition consts, the stored carries
    (``bufs``: the carry after each pass, a leading axis of ``length``) and two unused scalars.
    ``loop_tangent``'s outputs: the final carry's differentiable leaves, then the outputs' floating
    leaves (a leading axis of ``length // every``)."""

    def __init__(
        self,
        body: Callable[..., Any],
        c0: Any,
        n_bc: int,
        length: int,
        out: Callable[..., Any] | None = None,
        every: int = 1,
        out_avals: list[Any] | None = None,
    ) -> None:
        super().__init__(body, _never, c0, n_bc, 0, max(length, 1))
        self.length = length
        self.out = out
        self.every = every
        self.n_out = length // every if out is not None else 0
        # (the outputs' leaves, one row each, and which are floating: those carry a tangent)
        self.out_avals = out_avals or []
        self.y_diff = [i for i, a in enumerate(self.out_avals) if _floating(a)]

    def __repr__(self) -> str:
        return f"ScanSpec(length={self.length}, every={self.every}, outputs={self.n_out})"

    def tangent_avals(self, res: list[Any]) -> list[Any]:
        rows = [self.out_avals[i] for i in self.y_diff]
        return [
            *super().tangent_avals(res),
            *(jax.core.ShapedArray((self.n_out, *a.shape), a.dtype) for a in rows),
        ]

    def output(self, cl: list[Array], bcl: list[Array]) -> list[Array]:
        assert self.out is not None  # (only with outputs)
        return jax.tree_util.tree_leaves(self.out(jax.tree_util.tree_unflatten(self.tree, cl), *bcl))

    def primal(self, cl: list[Array], bcl: list[Array]) -> tuple[list[Array], list[Array]]:
        """The plain run: the final carry's leaves and the outputs' leaves (rows stacked)."""

        def steps(c: list[Array], n: int) -> list[Array]:
            return jax.lax.scan(lambda c, _: (self.step(c, bcl), None), c, None, length=n)[0]

        if self.out is None:
            return steps(list(cl), self.length), []

        def interval(c: list[Array], _: Any) -> tuple[list[Array], list[Array]]:
            c = steps(c, self.every)
            return c, self.output(c, bcl)

        return jax.lax.scan(interval, list(cl), None, length=self.n_out)

    def kept(self, cl: list[Array], bcl: list[Array]) -> tuple[list[Array], list[Array], list[Array]]:
        """The run keeping every carry: final carry, outputs, the carry after each pass."""

        def steps(c: list[Array], n: int) -> tuple[list[Array], list[Array]]:
            def one(c: list[Array], _: Any) -> tuple[list[Array], list[Array]]:
                c = self.step(c, bcl)
                return c, c

            return jax.lax.scan(one, c, None, length=n)

        if self.out is None:
            c, bufs = steps(list(cl), self.length)
            return c, [], bufs

        def interval(c: list[Array], _: Any) -> tuple[list[Array], tuple[list[Array], list[Array]]]:
            c, kept = steps(c, self.every)
            return c, (self.output(c, bcl), kept)

        c, (ys, kept) = jax.lax.scan(interval, list(cl), None, length=self.n_out)
        return c, ys, [b.reshape(self.length, *b.shape[2:]) for b in kept]

    def _diff_out(self, out: tuple[list[Array], list[Array]]) -> list[Array]:
        c, ys = out
        return [c[i] for i in self.c_diff] + [ys[i] for i in self.y_diff]

    def tangent(self, res: list[Array], lin: list[Array]) -> list[Array]:
        """The forward sensitivity: the JVP of the plain run from the start."""
        return jax.jvp(lambda d: self.bounded_diff(res, d), (self.res_diff(res),), (list(lin),))[1]

    def bounded_diff(self, res: list[Array], d: list[Array]) -> list[Array]:
        """The final carry's differentiable leaves and the outputs' floating ones from the start's and
        the consts' differentiable leaves (second order: the plain run, which JAX differentiates)."""
        cl, bcl, _, _, _, _ = self.split_res(res)
        c, b = self.with_diff(cl, bcl, d)
        return self._diff_out(self.primal(c, b))

    def adjoint(self, res: list[Array], ct: list[Array]) -> list[Array]:
        """The discrete adjoint: the pass's Jacobians at the stored carries, ``K`` passes at a time
        (``vmap`` of ``jacfwd``), each chunk swept backwards by matrix-vector products; the outputs'
        cotangents pulled back through the output (``vmap`` of its VJP) and added to the sweep after
        the pass that preceded them."""
        cl, bcl, _, after, _, _ = self.split_res(res)
        length, nd = self.length, len(self.c_diff)
        z0, unravel_z = ravel_pytree(self.diff_of(cl, bcl))
        dtype = jnp.result_type(z0)
        lam0 = ravel_pytree(list(ct[:nd]))[0].astype(dtype)
        n_c, n_z = lam0.size, z0.size
        before = [jnp.concatenate([x[None], b[:-1]]) for x, b in zip(cl, after)]
        g0 = jnp.zeros((n_z - n_c,), dtype)
        # (the outputs: each row's cotangent pulled back to the carry it was taken from and the consts)
        push = jnp.zeros((length, n_c), dtype)
        if self.n_out and self.y_diff:
            rows = [b[self.every - 1 :: self.every] for b in after]

            def pull(c: list[Array], cty: list[Array]) -> Array:
                def g(z: Array) -> list[Array]:
                    cc, bb = self.with_diff(c, bcl, unravel_z(z))
                    ys = self.output(cc, bb)
                    return [ys[i] for i in self.y_diff]

                return jax.vjp(g, ravel_pytree(self.diff_of(c, bcl))[0])[1](cty)[0].astype(dtype)

            pulled = jax.vmap(pull)(rows, list(ct[nd:]))
            push = push.at[self.every - 1 :: self.every].set(pulled[:, :n_c])
            g0 = g0 + jnp.sum(pulled[:, n_c:], axis=0)
        k = int(max(1, min(length, JAC_BYTES // max(1, n_c * n_z * dtype.itemsize))))
        chunks = -(-length // k)
        pad = chunks * k - length

        def chunked(xs: Array) -> Array:
            # (padded with the last row: finite Jacobians, masked out of the sweep)
            xs = jnp.concatenate([xs, jnp.repeat(xs[-1:], pad, axis=0)]) if pad else xs
            return xs.reshape(chunks, k, *xs.shape[1:])

        def jac(c: list[Array]) -> Array:
            f, z = self._flat_step(c, bcl)
            return jax.jacfwd(f)(z).astype(dtype)

        def chunk(state: Any, xs: Any) -> tuple[Any, None]:
            cs, pushes, ok = xs
            jacs = jax.vmap(jac)(cs)

            def back(s: Any, x: Any) -> tuple[Any, None]:
                lam, g = s
                jk, pk, okk = x
                gz = jnp.matmul(jk.T, lam + pk, precision=HIGHEST)
                return (jnp.where(okk, gz[:n_c], lam), jnp.where(okk, g + gz[n_c:], g)), None

            return jax.lax.scan(back, state, (jacs, pushes, ok), reverse=True)[0], None

        valid = (jnp.arange(chunks * k) < length).reshape(chunks, k)
        xs = ([chunked(b) for b in before], chunked(push), valid)
        lam, g = jax.lax.scan(chunk, (lam0, g0), xs, reverse=True)[0]
        return list(unravel_z(jnp.concatenate([lam, g])))

    def _flat_step(self, cl: list[Array], bcl: list[Array]) -> tuple[Callable[[Array], Array], Array]:
        """The pass at carry ``cl`` as a function of the flat differentiable inputs (carry leaves,
        then consts) to its flat differentiable output, and those inputs."""
        z0, unravel = ravel_pytree(self.diff_of(cl, bcl))

        def f(z: Array) -> Array:
            c, b = self.with_diff(cl, bcl, unravel(z))
            out = self.step(c, b)
            return ravel_pytree([out[i] for i in self.c_diff])[0]

        return f, z0


def _nonzero(d: Any) -> bool:
    return not _is_symbolic_zero(d) and jnp.result_type(d) != jax.dtypes.float0


def _size(xs: list[Array]) -> int:
    return int(sum(int(np.prod(jnp.shape(x))) for x in xs))


def _bytes(xs: list[Array]) -> int:
    return int(sum(int(np.prod(jnp.shape(x))) * jnp.result_type(x).itemsize for x in xs))


def scan_linearized(
    step: Callable[[Any, Array], Any],
    carry: Any,
    start: Any,
    length: int,
    output: Callable[[Any, Array], Any] | None = None,
    every: int = 1,
) -> Any:
    """``length`` passes ``carry = step(carry, n)`` for ``n = start, start + 1, ...``: a plain
    ``lax.scan`` when evaluated, differentiated by batched Jacobians where that pays (module
    docstring), else by JAX's own scan derivatives. Returns the final carry; with ``output``,
    ``(final carry, outputs)``: ``output(carry, n)`` after passes ``every``, ``2 every``, ... (``n``
    the passes so far; ``length`` a multiple of ``every``), stacked."""
    if output is not None and (every <= 0 or length % every):
        raise ValueError(f"scan_linearized: length {length} is not a multiple of every={every}")
    if length <= 0:
        if output is None:
            return carry
        rows = jax.eval_shape(output, carry, jnp.asarray(start, jnp.int32))
        return carry, jax.tree_util.tree_map(lambda a: jnp.zeros((0, *a.shape), a.dtype), rows)

    def body(s: Any) -> Any:
        return step(s[0], s[1]), s[1] + 1

    init = (carry, jnp.asarray(start, jnp.int32))
    # (the functions below keep only closure-converted programs: never ``step`` or ``output``, which
    # may hold a system that JAX's caches of the traced program would then keep alive)
    has_out = output is not None
    body_c, b_consts = closure(body, init)
    nb = len(b_consts)
    consts = list(b_consts)
    out_c: Callable[..., Any] | None = None
    out_tree: Any = None
    out_avals: list[Any] = []
    if output is not None:
        out_c, o_consts, shapes = closure_and_shape(lambda s: output(s[0], s[1] - start), init)
        consts += o_consts
        out_avals = [jax.core.ShapedArray(a.shape, a.dtype) for a in jax.tree_util.tree_leaves(shapes)]
        out_tree = jax.tree_util.tree_structure(shapes)

    def body_all(s: Any, *cs: Any) -> Any:
        return body_c(s, *cs[:nb])

    def out_all(s: Any, *cs: Any) -> Any:
        assert out_c is not None  # (only with outputs)
        return out_c(s, *cs[nb:])

    def spec_for(s0: Any, bc: list[Array], tangents: list[Any] | None) -> tuple[ScanSpec, list[Array], Any]:
        bc = [jnp.asarray(b) for b in bc]  # (a Python scalar closed over)
        body_p, bp, dbp = packed(body_all, bc, tangents)
        out_p = packed(out_all, bc, tangents)[0] if has_out else None
        spec = ScanSpec(body_p, s0, len(bp), length, out_p, every, out_avals)
        return spec, bp, dbp

    def finish(c_leaves: list[Array], ys: list[Array], tree: Any) -> Any:
        c = jax.tree_util.tree_unflatten(tree, c_leaves)
        return c if not has_out else (c, jax.tree_util.tree_unflatten(out_tree, ys))

    @jax.custom_jvp
    def run(s0: Any, bc: Any) -> Any:
        spec = ScanSpec(body_all, s0, len(bc), length, out_all if has_out else None, every, out_avals)
        cl, tree = jax.tree_util.tree_flatten(s0)
        return finish(*spec.primal(cl, list(bc)), tree)

    def rule(primals: Any, tangents: Any) -> Any:
        s0, bc = primals
        base, bp, dbp_ = spec_for(s0, list(bc), list(tangents[1]))
        dbp = dbp_ or []
        cl, tree = jax.tree_util.tree_flatten(s0)
        dcl = jax.tree_util.tree_leaves(tangents[0], is_leaf=_is_symbolic_zero)
        spec = cast(ScanSpec, base.analysed(cl, bp, [_nonzero(d) for d in dcl], [_nonzero(d) for d in dbp]))
        diff = spec.diff_of(cl, bp)
        worth = (
            length >= MIN_LENGTH
            and spec.eqns >= MIN_EQNS
            and not spec.guarded
            and 0 < _size(diff) <= MAX_DIRECTIONS
            and length * _bytes(cl) <= STORE_BYTES
            and all(_floating(x) for x in diff)
            and bool(spec.c_diff)
        )
        if not worth and spec.c_diff and _by_jacobian(spec, cl, bp):
            # (a small step differentiated in few scalars: one run carrying a tangent per input, as
            # `adjoint` does for loops; a large step keeps the batched Jacobians, whose cost does not
            # grow with the inputs as a run carrying a tangent per input does: MJX's acrobot, 3 masses,
            # 33 vs 53 ms)
            (c, ys), (jc, jys) = jacobian_of(spec, spec.primal, cl, bp)  # (plain scans: any order)
            flat = jnp.concatenate([jnp.ravel(x) for x in _jacobian_in(spec, dcl, dbp)])
            dj_c: list[Any] = [_symbolic_zero(x) for x in c]
            dj_ys: list[Any] = [_symbolic_zero(y) for y in ys]
            for i in spec.c_diff:
                dj_c[i] = jnp.tensordot(flat.astype(jc[i].dtype), jc[i], axes=1, precision=HIGHEST)
            for i in spec.y_diff:
                dj_ys[i] = jnp.tensordot(flat.astype(jys[i].dtype), jys[i], axes=1, precision=HIGHEST)
            return finish(c, ys, tree), finish(dj_c, dj_ys, tree)
        if not worth:
            prim = (s0, tuple(bp))
            tang = _materialize(prim, (tangents[0], tuple(dbp)))
            return jax.jvp(lambda s, b: finish(*base.primal(jax.tree_util.tree_leaves(s), list(b)), tree), prim, tang)
        c, ys, bufs = spec.kept(cl, bp)
        z = jnp.zeros((), jnp.int32)
        d_c: list[Any] = [_symbolic_zero(x) for x in c]
        d_ys: list[Any] = [_symbolic_zero(y) for y in ys]
        lin = [dcl[i] for i in spec.c_diff] + [dbp[i] for i in spec.bc_diff]
        lin = [d if _nonzero(d) else jnp.zeros(jnp.shape(x), jnp.result_type(x)) for d, x in zip(lin, diff)]
        res = [*cl, *bp, *bufs, z, z]
        outs = loop_tangent_p.bind(*res, *lin, spec=spec)
        for i, d in zip(spec.c_diff, outs[: len(spec.c_diff)]):
            d_c[i] = d
        for i, d in zip(spec.y_diff, outs[len(spec.c_diff) :]):
            d_ys[i] = d
        return finish(c, ys, tree), finish(d_c, d_ys, tree)

    run.defjvp(rule, symbolic_zeros=True)
    out = run(init, tuple(consts))
    if output is None:
        return out[0]
    return out[0][0], out[1]
