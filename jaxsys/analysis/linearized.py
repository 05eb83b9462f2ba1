"""Reverse mode through a fixed-step scan by Jacobians batched over its steps.

JAX's reverse mode of a ``lax.scan`` runs one step's VJP after another. For a step of thousands of
tiny operations (a MuJoCo plant's vector field: MJX's forward dynamics, four times a step for RK4),
each VJP is mostly the overhead of those operations, paid 1,000 times in sequence. But reverse mode
needs only the step's Jacobian at each step, and the Jacobians do not depend on each other: they
can all be computed at once, by forward mode (``jax.jacfwd``) ``vmap``-ed over the stored states of
the whole run, where every operation works on a batch. The backward sweep is then a product of
small matrices.

`scan_linearized` is a scan that runs as a plain ``lax.scan`` when evaluated; differentiated, it
keeps its carries and its tangent map is the primitive ``loop_tangent`` of `adjoint` with a
`ScanSpec`, whose transpose (``loop_adjoint``) is that batched sweep. So

* ``jax.jvp`` / ``jax.jacfwd``: the JVP of the plain scan from the start (as JAX's own; a
  ``jax.jvp``, which also returns the primal, runs the forward pass once more: the kept run's;
  ``jax.jacfwd`` discards it, and JAX drops it);
* ``jax.grad`` / ``jax.vjp``: the Jacobians of the step in the differentiable carry leaves and
  consts (``D`` directions), batched over the steps in chunks of at most ``JAC_BYTES``, then the sweep;
* second order: through the plain scan (JAX differentiates it to any order);
* ``vmap``: the primitives' rules, vmapped.

It is chosen where it pays (measured on this 2-core CPU): the step is large (at least
``MIN_EQNS`` equations), the directions few (``D <= MAX_DIRECTIONS``), the carries fit in
``STORE_BYTES``, and the step has no side effects (it is evaluated again, batched). Otherwise the
scan is differentiated by JAX as it is. ``jax.grad`` through 1,000 RK4 steps of the MJCF acrobot,
with respect to a body mass (D = 4 states + 3 masses), float32: 92 ms by JAX's scan, 33 ms this
way, 4x the 8.4 ms forward run; ``jax.jacfwd`` unchanged, 22 ms (benchmarks S10-grad,
``ab_compare.py``).

Imports: `adjoint` (the primitives), `loops` (closure conversion, packing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .adjoint import LoopSpec, _is_inexact, _is_symbolic_zero, _tangent_of
from .loops import _materialize, closure, packed


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


class ScanSpec(LoopSpec):
    """A `LoopSpec` for ``length`` passes of ``body`` (a scan: no condition, no checkpoints). The
    residuals are laid out as a `LoopSpec`'s: the start carry, the body's consts, no condition
    consts, the stored carries (``bufs``: the carry before each pass, a leading axis of
    ``length``) and two unused scalars."""

    def __init__(self, body: Callable[..., Any], c0: Any, n_bc: int, length: int) -> None:
        super().__init__(body, _never, c0, n_bc, 0, max(length, 1))
        self.length = length

    def __repr__(self) -> str:
        return f"ScanSpec(length={self.length})"

    def _flat_step(self, cl: list[Array], bcl: list[Array]) -> tuple[Callable[[Array], Array], Array]:
        """The pass at carry ``cl`` as a function of the flat differentiable inputs (carry leaves,
        then consts) to its flat differentiable output, and those inputs."""
        z0, unravel = ravel_pytree(self.diff_of(cl, bcl))

        def f(z: Array) -> Array:
            c, b = self.with_diff(cl, bcl, unravel(z))
            out = self.step(c, b)
            return ravel_pytree([out[i] for i in self.c_diff])[0]

        return f, z0

    def tangent(self, res: list[Array], lin: list[Array]) -> list[Array]:
        """The forward sensitivity: the JVP of the plain scan from the start carry."""
        return jax.jvp(lambda d: self.bounded_diff(res, d), (self.res_diff(res),), (list(lin),))[1]

    def adjoint(self, res: list[Array], ct: list[Array]) -> list[Array]:
        """The discrete adjoint: the pass's Jacobians at the stored carries, ``K`` steps at a time
        (``vmap`` of ``jacfwd``), each chunk swept backwards by matrix-vector products."""
        cl, bcl, _, bufs, _, _ = self.split_res(res)
        length = self.length
        z0, unravel_z = ravel_pytree(self.diff_of(cl, bcl))
        lam0 = ravel_pytree(list(ct))[0]
        n_c, n_z = lam0.size, z0.size
        dtype = jnp.result_type(z0)
        k = int(max(1, min(length, JAC_BYTES // max(1, n_c * n_z * dtype.itemsize))))
        chunks = -(-length // k)
        pad = chunks * k - length
        # (padded with the last stored carry: finite Jacobians, masked out of the sweep)
        padded = [jnp.concatenate([b, jnp.repeat(b[-1:], pad, axis=0)]) if pad else b for b in bufs]
        steps = [b.reshape(chunks, k, *b.shape[1:]) for b in padded]
        valid = (jnp.arange(chunks * k) < length).reshape(chunks, k)

        def jac(c: list[Array]) -> Array:
            f, z = self._flat_step(c, bcl)
            return jax.jacfwd(f)(z).astype(dtype)

        def chunk(state: Any, xs: Any) -> tuple[Any, None]:
            lam, g = state
            cs, ok = xs
            jacs = jax.vmap(jac)(cs)

            def back(s: Any, x: Any) -> tuple[Any, None]:
                lam, g = s
                jk, okk = x
                gz = jk.T @ lam
                return (jnp.where(okk, gz[:n_c], lam), jnp.where(okk, g + gz[n_c:], g)), None

            return jax.lax.scan(back, (lam, g), (jacs, ok), reverse=True)[0], None

        g0 = jnp.zeros((n_z - n_c,), dtype)
        lam, g = jax.lax.scan(chunk, (lam0.astype(dtype), g0), (steps, valid), reverse=True)[0]
        return list(unravel_z(jnp.concatenate([lam, g])))

    def bounded_diff(self, res: list[Array], d: list[Array]) -> list[Array]:
        """The final carry's differentiable leaves from the start's and the consts' (second order:
        the plain scan, which JAX differentiates)."""
        cl, bcl, _, _, _, _ = self.split_res(res)
        c, b = self.with_diff(cl, bcl, d)
        out = jax.lax.scan(lambda c, _: (self.step(c, b), None), c, None, length=self.length)[0]
        return [out[i] for i in self.c_diff]


def _nonzero(d: Any) -> bool:
    return not _is_symbolic_zero(d) and jnp.result_type(d) != jax.dtypes.float0


def _size(xs: list[Array]) -> int:
    return int(sum(int(np.prod(jnp.shape(x))) for x in xs))


def _bytes(xs: list[Array]) -> int:
    return int(sum(int(np.prod(jnp.shape(x))) * jnp.result_type(x).itemsize for x in xs))


def scan_linearized(step: Callable[[Any, Array], Any], carry: Any, start: Any, length: int) -> Any:
    """``length`` passes ``carry = step(carry, n)`` for ``n = start, start + 1, ...``: a plain
    ``lax.scan`` when evaluated, differentiated by batched Jacobians where that pays (module
    docstring), else by JAX's own scan derivatives. Returns the final carry."""
    if length <= 0:
        return carry

    def body(s: Any) -> Any:
        return step(s[0], s[1]), s[1] + 1

    init = (carry, jnp.asarray(start, jnp.int32))
    body_c, consts = closure(body, init)

    def plain(s0: Any, bp: list[Array], body_p: Callable[..., Any]) -> Any:
        return jax.lax.scan(lambda s, _: (body_p(s, *bp), None), s0, None, length=length)[0]

    @jax.custom_jvp
    def run(s0: Any, bc: Any) -> Any:
        return plain(s0, list(bc), body_c)

    def rule(primals: Any, tangents: Any) -> Any:
        s0, bc = primals
        body_p, bp, dbp_ = packed(body_c, list(bc), list(tangents[1]))
        dbp = dbp_ or []
        cl, tree = jax.tree_util.tree_flatten(s0)
        dcl = jax.tree_util.tree_leaves(tangents[0], is_leaf=_is_symbolic_zero)
        base = ScanSpec(body_p, s0, len(bp), length)
        spec = base.analysed(cl, bp, [_nonzero(d) for d in dcl], [_nonzero(d) for d in dbp])
        worth = (
            length >= MIN_LENGTH
            and spec.eqns >= MIN_EQNS
            and not spec.guarded
            and 0 < _size(spec.diff_of(cl, bp)) <= MAX_DIRECTIONS
            and length * _bytes(cl) <= STORE_BYTES
            and all(_is_inexact(x) for x in spec.diff_of(cl, bp))
        )
        if not worth:
            prim = (s0, tuple(bp))
            tang = _materialize(prim, (tangents[0], tuple(dbp)))
            return jax.jvp(lambda s, b: plain(s, list(b), body_p), prim, tang)

        def keep(s: Any, _: Any) -> tuple[Any, list[Array]]:
            return body_p(s, *bp), jax.tree_util.tree_leaves(s)

        out, bufs = jax.lax.scan(keep, s0, None, length=length)
        z = jnp.zeros((), jnp.int32)
        d_out = _tangent_of(base, cl, list(bp), [], z, list(bufs), z, dcl, list(dbp), spec=spec)
        return out, jax.tree_util.tree_unflatten(tree, d_out)

    run.defjvp(rule, symbolic_zeros=True)
    return run(init, tuple(consts))[0]
