"""The differentiable while loop (jaxsys.analysis.loops.bounded_while) against closed forms.

The loop runs ``x <- x + h * (a - b x)`` (a relaxation) while ``i < n``, with ``n`` a traced value
smaller than ``max_steps``: the final ``x`` is ``a/b + (x0 - a/b) (1 - h b)^n``, whose derivatives
in ``a``, ``b`` and ``x0`` are closed forms. Passes beyond ``n`` must change nothing: neither the
value nor any derivative (forward, reverse, second order, under ``vmap``), whether the innermost
block runs them and discards them (a select) or skips them (a conditional, for bodies with side
effects).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsys.analysis.loops import (
    _has_side_effects,
    bounded_levels,
    bounded_while,
    pack_arrays,
    while_fast_primal,
    while_with_writes_fast_primal,
)


H = 0.01


def closed(p, n):
    a, b, x0 = p[0], p[1], p[2]
    return a / b + (x0 - a / b) * (1 - H * b) ** n


def run(p, n, max_steps, loop=bounded_while, effect=False):
    a, b, x0 = p[0], p[1], p[2]

    def body(c):
        i, x = c
        if effect:
            jax.debug.callback(lambda *_: None, x)
        return i + 1, x + H * (a - b * x)

    return loop(lambda c: c[0] < n, body, (jnp.zeros((), jnp.int32), x0), max_steps)[1]


P = jnp.array([0.7, 1.3, 0.2])


@pytest.mark.parametrize("max_steps", [37, 300, 5000])
@pytest.mark.parametrize("effect", [False, True])
def test_value_and_derivatives_match_the_closed_form(max_steps, effect):
    n = jnp.asarray(29)  # fewer than max_steps; not a multiple of the innermost block
    f = jax.jit(lambda p: run(p, n, max_steps, effect=effect))
    np.testing.assert_allclose(f(P), closed(P, 29), rtol=1e-13)
    g_exact = jax.grad(closed)(P, 29.0)
    np.testing.assert_allclose(jax.jit(jax.grad(f))(P), g_exact, rtol=1e-11)
    np.testing.assert_allclose(jax.jit(jax.jacfwd(f))(P), g_exact, rtol=1e-11)
    # second order, both nestings
    h_exact = jax.hessian(closed)(P, 29.0)
    np.testing.assert_allclose(jax.jit(jax.hessian(f))(P), h_exact, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(jax.jit(jax.jacrev(jax.jacrev(f)))(P), h_exact, rtol=1e-10, atol=1e-13)


def test_vmap_with_different_trip_counts_and_grad_of_the_sum():
    ns = jnp.array([0, 1, 15, 16, 17, 40])
    ps = P + 0.1 * jnp.arange(6.0)[:, None]

    def batch(ps):
        return jax.vmap(lambda p, n: run(p, n, 64))(ps, ns)

    expected = jax.vmap(closed)(ps, ns.astype(float))
    np.testing.assert_allclose(jax.jit(batch)(ps), expected, rtol=1e-13)
    g = jax.jit(jax.grad(lambda ps: jnp.sum(batch(ps))))(ps)
    np.testing.assert_allclose(g, jax.vmap(jax.grad(closed))(ps, ns.astype(float)), rtol=1e-11)


@pytest.mark.parametrize("reverse", ["adjoint", "bounded"])
def test_the_fast_primal_loop_differentiates_by_either_rule(reverse):
    """while_fast_primal's default rule (the discrete adjoint, jaxsys.analysis.adjoint) and the
    bounded loop's JVP kept for comparison give the closed-form gradient."""

    def loop(*args):
        return while_fast_primal(*args, reverse=reverse)

    n = jnp.asarray(100)
    f = jax.jit(lambda p: run(p, n, 1000, loop=loop))
    np.testing.assert_allclose(f(P), closed(P, 100), rtol=1e-13)
    np.testing.assert_allclose(jax.jit(jax.grad(f))(P), jax.grad(closed)(P, 100.0), rtol=1e-11)
    # in float32 too: the same loop, one precision down
    p32 = P.astype(jnp.float32)
    g32 = jax.grad(lambda p: run(p, n, 1000, loop=loop))(p32)
    assert g32.dtype == jnp.float32
    np.testing.assert_allclose(g32, jax.grad(closed)(P, 100.0), rtol=2e-4)


def test_side_effects_are_found_in_nested_jaxprs():
    def plain(x):
        return jax.lax.cond(x > 0, jnp.sin, jnp.cos, x)

    def with_callback(x):
        return jax.lax.cond(x > 0, lambda x: (jax.debug.callback(print, x), x)[1], jnp.cos, x)

    assert not _has_side_effects(jax.make_jaxpr(plain)(1.0))
    assert _has_side_effects(jax.make_jaxpr(with_callback)(1.0))


@pytest.mark.parametrize("max_steps", [1, 16, 17, 1000, 10**6, 10**8])
@pytest.mark.parametrize("carry_bytes", [16, 10**6])
def test_levels_cover_max_steps_without_waste(max_steps, carry_bytes):
    levels = bounded_levels(max_steps, carry_bytes)
    total = int(np.prod(levels))
    assert total >= max_steps
    assert levels[0] == 16 and all(n <= (64 if carry_bytes < 2048 else 16) for n in levels)
    # the outermost block is no longer than it needs to be
    assert total // levels[-1] * (levels[-1] - 1) < max_steps or len(levels) == 1


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_finished_passes_never_meet_infinite_partials(dtype):
    """A body whose partials are infinite at the finished state: steps of min(0.1, T - t), adding
    a sqrt(h); once t = T, h = 0 and d sqrt(h)/dh is infinite. x(T) = a (10 sqrt(0.1) + sqrt(T - 1))
    for 1 < T < 1.1. Finished passes run (the innermost block of 16 holds 11 real ones) but must not
    turn the gradient into NaN, unbatched or under vmap."""

    def final(q):
        a, T = q[0], q[1]

        def body(c):
            t, x = c
            h = jnp.minimum(jnp.asarray(0.1, dtype), T - t)
            return t + h, x + a * jnp.sqrt(h)

        return bounded_while(lambda c: c[0] < T, body, (jnp.zeros((), dtype), jnp.zeros((), dtype)), 1000)[1]

    def closed(q):
        a, T = q[0], q[1]
        return a * (10 * jnp.sqrt(0.1) + jnp.sqrt(T - 1.0))

    q = jnp.array([0.7, 1.05], dtype)
    rtol = 1e-9 if dtype == jnp.float64 else 2e-3  # float32: t after ten steps of 0.1 is off by ~1e-7
    np.testing.assert_allclose(jax.jit(jax.grad(final))(q), jax.grad(closed)(q.astype(jnp.float64)), rtol=rtol)
    qs = jnp.stack([q, jnp.array([1.3, 1.08], dtype)])
    g = jax.jit(jax.vmap(jax.grad(final)))(qs)
    np.testing.assert_allclose(g, jax.vmap(jax.grad(closed))(qs.astype(jnp.float64)), rtol=rtol)


def run_writing(p, n, max_steps, rows):
    """The relaxation run as a saving loop: pass i writes x_i^2 (after its step) to row i; the
    buffer has ``rows`` rows (>= max_steps), those past the n passes keep their initial ones."""
    a, b = p[0], p[1]

    def body(c):
        i, x = c
        x = x + H * (a - b * x)
        return (i + 1, x), [(i, x**2, jnp.array(True))]

    buf0 = jnp.full((rows,), 7.0, p.dtype)
    (_, x), buf = while_with_writes_fast_primal(
        lambda c: c[0] < n, body, (jnp.zeros((), jnp.int32), p[2]), buf0, max_steps
    )
    return x, buf


def closed_writing(p, n, rows):
    i = jnp.arange(rows)
    return jnp.where(i < n, closed(p, i + 1) ** 2, 7.0)


@pytest.mark.parametrize("max_steps", [40, 300])
def test_the_saving_loop_differentiates_through_its_writes(max_steps):
    """grad and jacfwd of the written rows (and of the final carry) against the closed form, for
    passes in one scan (40) and in recomputed blocks (300 > WRITES_UNBLOCKED), with trip counts
    that stop short of max_steps, reach it, and write nothing; under vmap with different counts."""
    weights = jnp.linspace(0.5, 1.5, max_steps)

    def loss(p, n):
        x, buf = run_writing(p, n, max_steps, max_steps)
        return jnp.sum(weights * buf) + x

    def exact(p, n):
        return jnp.sum(weights * closed_writing(p, n, max_steps)) + closed(p, n)

    g, jf = jax.jit(jax.grad(loss)), jax.jit(jax.jacfwd(lambda p, n: run_writing(p, n, max_steps, max_steps)[1]))
    for n in (0, 1, 17, max_steps):
        nn = jnp.asarray(n)
        np.testing.assert_allclose(jax.jit(loss)(P, nn), exact(P, n), rtol=1e-12, err_msg=f"n={n}")
        np.testing.assert_allclose(g(P, nn), jax.grad(exact)(P, n), rtol=1e-10, err_msg=f"grad n={n}")
        np.testing.assert_allclose(jf(P, nn), jax.jacfwd(closed_writing)(P, n, max_steps), rtol=1e-10, atol=1e-14)
    ns = jnp.array([0, 5, max_steps - 3, max_steps])
    ps = P + 0.01 * jnp.arange(4.0)[:, None]
    gv = jax.jit(jax.grad(lambda ps: jnp.sum(jax.vmap(loss)(ps, ns))))(ps)
    np.testing.assert_allclose(gv, jax.vmap(jax.grad(exact))(ps, ns), rtol=1e-10)


def test_consts_with_and_without_a_tangent_are_packed_apart():
    """pack_arrays keeps a tangent-carrying group apart; the tangents of each group pack alike, a
    group of symbolic zeros to a symbolic zero; unpack inverts pack."""
    arrays = [jnp.full((k % 3 + 1,), k, jnp.float64) for k in range(10)]
    keys = [k % 2 == 0 for k in range(10)]
    vectors, unpack, pack = pack_arrays(arrays, keys)
    assert len(vectors) == 2
    for a, b in zip(unpack(vectors), arrays):
        np.testing.assert_array_equal(a, b)
    zero = jax.custom_derivatives.SymbolicZero
    tangents = [zero(jax.typeof(a)) if keys[k] else 2 * a for k, a in enumerate(arrays)]
    packed = pack(tangents)
    assert sum(isinstance(t, zero) for t in packed) == 1
    (dense,) = [t for t in packed if not isinstance(t, zero)]
    np.testing.assert_array_equal(dense, 2 * jnp.concatenate([a for k, a in enumerate(arrays) if not keys[k]]))
