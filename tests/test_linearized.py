"""Reverse mode through a fixed-step scan by Jacobians batched over its steps
(jaxsys.analysis.linearized, issue #39: ``jax.grad`` through 1,000 steps of a MuJoCo plant), against
closed forms.

The scan runs ``x <- x + H * (a - b x)`` for ``n`` passes (``n`` static): the final ``x`` is
``a/b + (x0 - a/b) (1 - H b)^n``. The thresholds that choose the batched sweep (a large step, few
directions) are lowered here so that this small step takes it; the Jacobians are computed in chunks
that do not divide the run (padded, masked).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsys.analysis import adjoint, linearized
from jaxsys.analysis.linearized import scan_linearized


H = 0.01
P = jnp.array([0.7, 1.3, 0.2])


def closed(p, n):
    a, b, x0 = p[0], p[1], p[2]
    return a / b + (x0 - a / b) * (1 - H * b) ** n


def run(p, n):
    a, b, x0 = p[0], p[1], p[2]

    def step(c, k):
        x, count = c
        # (a carried vector with a tangent, an integer counter without one, the pass index)
        return (x + H * (a - b * x) + 0.0 * k, count + 1)

    x, count = scan_linearized(step, (jnp.stack([x0, 2 * x0]), jnp.zeros((), jnp.int32)), 0, n)
    return x[0] + 0.0 * count


@pytest.fixture
def batched(monkeypatch):
    monkeypatch.setattr(linearized, "MIN_EQNS", 0)
    monkeypatch.setattr(linearized, "MIN_LENGTH", 2)
    # 8 bytes a Jacobian entry, 2 x 5 entries: chunks of 3 passes
    monkeypatch.setattr(linearized, "JAC_BYTES", 3 * 2 * 5 * 8)


def _uses_batched_sweep(fn, *args):
    return "jaxsys_loop_adjoint" in str(jax.make_jaxpr(fn)(*args))


@pytest.mark.parametrize("n", [2, 3, 40])
def test_batched_sweep_against_the_closed_form(batched, n):
    """grad (the batched sweep), jacfwd (a scan of JVPs at the stored carries), jacrev, the Hessian
    (second order through the plain scan) and vmap(grad) equal the closed form's to 1e-12."""
    f = lambda p: run(p, n)  # noqa: E731
    assert _uses_batched_sweep(jax.grad(f), P)
    np.testing.assert_allclose(f(P), closed(P, n), rtol=1e-13)
    exact = jax.grad(closed)(P, float(n))
    np.testing.assert_allclose(jax.jit(jax.grad(f))(P), exact, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(jax.jit(jax.jacfwd(f))(P), exact, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(jax.jacrev(f)(P), exact, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(jax.hessian(f)(P), jax.hessian(closed)(P, float(n)), rtol=1e-10, atol=1e-13)
    ps = jnp.stack([P, P * 1.5, P * 0.5])
    np.testing.assert_allclose(
        jax.jit(jax.vmap(jax.grad(f)))(ps), jnp.stack([jax.grad(closed)(q, float(n)) for q in ps]), rtol=1e-12
    )


def test_batched_sweep_in_float32(batched):
    with jax.enable_x64(False):
        p = P.astype(jnp.float32)
        g = jax.jit(jax.grad(lambda p: run(p, 40)))(p)
        assert g.dtype == jnp.float32
        np.testing.assert_allclose(g, jax.grad(closed)(p, 40.0), rtol=2e-5)
        # (with outputs every 8 passes: a loss on the rows)
        p4 = jnp.concatenate([p, jnp.array([1.7], jnp.float32)])
        ks = 8.0 * jnp.arange(1, 6, dtype=jnp.float32)
        g = jax.jit(jax.grad(lambda q: jnp.sum(run_saved(q, 40, 8)[1]["x"] ** 2)))(p4)
        assert g.dtype == jnp.float32
        np.testing.assert_allclose(g, jax.grad(lambda q: jnp.sum(closed(q, ks) ** 2))(p4), rtol=2e-5, atol=1e-6)


def _scans(fn, *args):
    return str(jax.make_jaxpr(fn)(*args)).count("scan[")


def test_small_steps_and_many_directions_keep_jaxs_scan_derivative(batched, monkeypatch):
    """Where batching does not pay (more directions than MAX_DIRECTIONS here; a step of few equations
    by default) and the inputs are too many for the Jacobian (forced here: this run has three), the
    scan is differentiated by JAX as it is (a scan and its transpose), with the same values."""
    monkeypatch.setattr(linearized, "MAX_DIRECTIONS", 2)  # (5 here: 2 carried + 3 parameters)
    monkeypatch.setattr(adjoint, "JACOBIAN_INPUTS", (0,) * len(adjoint.JACOBIAN_INPUTS))
    monkeypatch.setattr(adjoint, "JACOBIAN_INPUTS_BETWEEN_SAVES", (0,) * len(adjoint.JACOBIAN_INPUTS))
    f = lambda p: run(p, 40)  # noqa: E731
    assert not _uses_batched_sweep(jax.grad(f), P) and _scans(jax.grad(f), P) == 2
    np.testing.assert_allclose(jax.grad(f)(P), jax.grad(closed)(P, 40.0), rtol=1e-12)
    monkeypatch.setattr(linearized, "MAX_DIRECTIONS", 64)
    monkeypatch.setattr(linearized, "MIN_EQNS", 1000)
    assert not _uses_batched_sweep(jax.grad(f), P)  # (the default MIN_EQNS: this step is small)


@pytest.mark.parametrize("every", [None, 8])
def test_small_steps_with_few_inputs_go_by_the_jacobian(every, reverse_by):
    """A small step differentiated in few scalars (three parameters, a fourth read by the outputs) is
    differentiated by its Jacobian: one scan carrying a tangent per input (the gradient's program
    holds no transposed scan); forced otherwise, by JAX's scan derivative. Both equal the closed
    form's: grad, jacfwd, the Hessian, vmap(grad), with and without outputs."""
    p4 = jnp.concatenate([P, jnp.array([1.7])])
    n = 40
    ks = (every or n) * jnp.arange(1, n // (every or n) + 1)

    def loss(p):
        if every is None:
            return run(p, n)
        final, ys = run_saved(p, n, every)
        return final + jnp.sum(ys["x"] ** 2) + jnp.sum(jnp.sin(ys["cx"][:, 1]))

    def exact(p):
        if every is None:
            return closed(p, n)
        x2 = closed(p.at[2].set(2 * p[2]), ks)
        return closed(p, n) + jnp.sum(closed(p, ks) ** 2) + jnp.sum(jnp.sin(p[3] * x2))

    # in float32 too: the gradient keeps the dtype, against the closed form's
    g32 = jax.jit(jax.grad(loss))(p4.astype(jnp.float32))
    assert g32.dtype == jnp.float32
    np.testing.assert_allclose(g32, jax.grad(exact)(p4), rtol=1e-4, atol=1e-6)
    plain = 1 if every is None else 2  # (the scans of the run: with outputs, one inside another)
    assert _scans(jax.grad(loss), p4) == (plain if reverse_by == "jacobian" else 2 * plain)
    _check_derivatives(loss, exact, p4)


def _check_derivatives(loss, exact, p4):
    """grad (jitted), jacfwd, the Hessian and vmap(grad) of ``loss`` equal those of ``exact``."""
    g = jax.grad(exact)(p4)
    np.testing.assert_allclose(jax.jit(jax.grad(loss))(p4), g, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(jax.jacfwd(loss)(p4), g, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(jax.hessian(loss)(p4), jax.hessian(exact)(p4), rtol=1e-9, atol=1e-12)
    ps = jnp.stack([p4, p4 * 1.2])
    np.testing.assert_allclose(jax.vmap(jax.grad(loss))(ps), jnp.stack([jax.grad(exact)(q) for q in ps]), rtol=1e-11)


def run_saved(p, n, every):
    """The relaxation with an output every ``every`` passes: (x, c * x) and the pass count (the
    output reads a parameter: its cotangent reaches the consts)."""
    a, b, x0, c = p[0], p[1], p[2], p[3]

    def step(s, k):
        return s + H * (a - b * s)

    def output(s, k):
        return {"x": s[0], "cx": c * s, "k": k}

    final, ys = scan_linearized(step, jnp.stack([x0, 2 * x0]), 0, n, output=output, every=every)
    return final[0], ys


@pytest.mark.parametrize("n,every", [(40, 8), (42, 1), (36, 36)])
def test_outputs_every_few_passes(batched, n, every):
    """Saved rows (a loss on a trajectory): values, grad, jacfwd, the Hessian and vmap(grad) of a loss
    on the rows and the final state equal the closed form's (x_j after passes (j+1) every)."""
    p4 = jnp.concatenate([P, jnp.array([1.7])])
    ks = every * jnp.arange(1, n // every + 1)

    def loss(p):
        final, ys = run_saved(p, n, every)
        return final + jnp.sum(ys["x"] ** 2) + jnp.sum(jnp.sin(ys["cx"][:, 1]))

    def exact(p):
        xs = closed(p, ks)
        x2 = closed(p.at[2].set(2 * p[2]), ks)
        return closed(p, n) + jnp.sum(xs**2) + jnp.sum(jnp.sin(p[3] * x2))

    final, ys = run_saved(p4, n, every)
    np.testing.assert_array_equal(ys["k"], ks)
    np.testing.assert_allclose(ys["x"], closed(p4, ks), rtol=1e-12)
    assert _uses_batched_sweep(jax.grad(loss), p4)
    _check_derivatives(loss, exact, p4)
