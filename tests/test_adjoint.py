"""The discrete adjoint of a while loop (jaxsys.analysis.adjoint), through
:func:`~jaxsys.analysis.loops.while_fast_primal`, against closed forms.

The loop runs ``x <- x + h * (a - b x)`` while ``i < n`` (``n`` traced): the final ``x`` is
``a/b + (x0 - a/b) (1 - h b)^n``. Trip counts are chosen around the adjoint's structure: the
segment length, the forward run's checkpoint buffer filling and thinning, and segments long enough
to be re-run and cut into pieces once or twice (a large carry shrinks the buffers to 16, so two
levels of cutting are reached at a few thousand passes).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsys as js
from jaxsys.analysis import adjoint
from jaxsys.analysis.compile_cache import clear_caches
from jaxsys.analysis.loops import while_fast_primal


H = 0.001
P = jnp.array([0.7, 1.3, 0.2])


def closed(p, n):
    a, b, x0 = p[0], p[1], p[2]
    return a / b + (x0 - a / b) * (1 - H * b) ** n


def run(p, n, max_steps=200_000, wide=0, effect=False):
    """The relaxation; ``wide`` > 0 adds a carried vector of that many zeros (a large carry)."""
    a, b, x0 = p[0], p[1], p[2]

    def body(c):
        i, x, pad = c
        if effect:
            jax.debug.callback(lambda *_: None, x)
        return i + 1, x + H * (a - b * x), pad

    c0 = (jnp.zeros((), jnp.int32), x0, jnp.zeros((wide,), p.dtype))
    return while_fast_primal(lambda c: c[0] < n, body, c0, max_steps)[1]


@pytest.fixture
def sweep(monkeypatch):
    """The discrete adjoint's sweep whatever the number of inputs (these loops have three: they
    would be differentiated by their Jacobian)."""
    monkeypatch.setattr(adjoint, "JACOBIAN_INPUTS", (0,) * len(adjoint.JACOBIAN_INPUTS))
    monkeypatch.setattr(adjoint, "JACOBIAN_INPUTS_BETWEEN_SAVES", (0,) * len(adjoint.JACOBIAN_INPUTS))


@pytest.mark.parametrize("wide", [0, 600])
def test_gradient_across_segments_thinning_and_cuts(wide, sweep):
    """grad and jacfwd against the closed form for trip counts around every boundary of the
    adjoint's structure (with wide=600 the carry is 4.8 KB: buffers of 16 carries, segments of 16)."""
    c0 = (jnp.zeros((), jnp.int32), P[2], jnp.zeros((wide,)))
    spec = adjoint.LoopSpec(lambda c: c, lambda c: True, c0, 0, 0, 200_000)
    seg, keep = spec.segment, spec.keep
    assert spec.depth >= 1 and (wide == 0 or (spec.width, seg) == (16, 16))
    # (segments; the checkpoint buffer's first thinning; past it, segments cut into pieces; with
    # wide=600, 5,000 passes are cut twice)
    ns = sorted({0, 1, seg - 1, seg, seg + 1, keep * seg - 1, keep * seg, keep * seg + 1, 2 * keep * seg + 7, 5000})
    f = jax.jit(lambda p, n: run(p, n, wide=wide))
    g = jax.jit(jax.grad(f))
    jf = jax.jit(jax.jacfwd(f))
    for n in ns:
        n_ = jnp.asarray(n)
        exact = jax.grad(closed)(P, float(n))
        np.testing.assert_allclose(f(P, n_), closed(P, n), rtol=1e-12, err_msg=f"n={n}")
        np.testing.assert_allclose(g(P, n_), exact, rtol=1e-10, atol=1e-14, err_msg=f"grad, n={n}")
        np.testing.assert_allclose(jf(P, n_), exact, rtol=1e-10, atol=1e-14, err_msg=f"jacfwd, n={n}")


@pytest.mark.parametrize("effect", [False, True])
def test_second_order_through_the_bounded_loop(effect, reverse_by):
    """Hessians (both nestings) differentiate the adjoint's primitives in their non-linear arguments:
    they go through the bounded loop, and must match the closed form; so must jacfwd(jacfwd)."""
    n = jnp.asarray(45)
    f = jax.jit(lambda p: run(p, n, max_steps=300, effect=effect))
    h_exact = jax.hessian(closed)(P, 45.0)
    for how in (jax.hessian, lambda f: jax.jacrev(jax.jacrev(f)), lambda f: jax.jacfwd(jax.jacfwd(f))):
        np.testing.assert_allclose(jax.jit(how(f))(P), h_exact, rtol=1e-9, atol=1e-13)
    np.testing.assert_allclose(jax.jit(jax.grad(f))(P), jax.grad(closed)(P, 45.0), rtol=1e-11)


@pytest.mark.parametrize("wide", [0, 600])
def test_vmap_with_different_trip_counts(wide, reverse_by):
    """Each member sweeps its own passes: grad of the batch's sum, and the batch's jacfwd. (20,000
    passes re-run their segments, with wide=600 on two levels and more: each member at its own
    level of the re-running while the others sweep.)"""
    ns = jnp.array([0, 1, 31, 33, 700, 3000, 20_000])
    ps = P + 0.05 * jnp.arange(7.0)[:, None]

    def batch(ps):
        return jax.vmap(lambda p, n: run(p, n, wide=wide))(ps, ns)

    expected = jax.vmap(jax.grad(closed))(ps, ns.astype(float))
    np.testing.assert_allclose(jax.jit(jax.grad(lambda ps: jnp.sum(batch(ps))))(ps), expected, rtol=1e-10)
    if wide == 0:  # (forward mode does not re-run)
        jf = jax.jit(jax.vmap(jax.jacfwd(lambda p, n: run(p, n))))(ps, ns)
        np.testing.assert_allclose(jf, expected, rtol=1e-10)


def test_float32(reverse_by):
    p32 = P.astype(jnp.float32)
    g = jax.jit(jax.grad(lambda p: run(p, jnp.asarray(2500))))(p32)
    assert g.dtype == jnp.float32
    np.testing.assert_allclose(g, jax.grad(closed)(P, 2500.0), rtol=2e-4)
    # batched, with different trip counts, still in float32
    ns = jnp.array([7, 2500])
    gv = jax.jit(jax.vmap(jax.grad(lambda p, n: run(p, n))))(jnp.stack([p32, p32]), ns)
    assert gv.dtype == jnp.float32
    np.testing.assert_allclose(gv, jax.vmap(jax.grad(closed))(jnp.stack([P, P]), ns.astype(float)), rtol=2e-4)


def test_leaves_reached_only_through_the_fixed_point_are_swept(reverse_by):
    """z takes its tangent from y, y from x, x from the parameter: the analysis of which carry
    leaves carry a derivative must iterate to a fixed point, or z's cotangent is dropped (a wrong
    gradient). A leaf computed under stop_gradient (s) carries none, and must not change the result."""
    k = 0.01

    def final_z(a, n, stop):
        def body(c):
            i, x, y, z, s = c
            s_new = jax.lax.stop_gradient(x) if stop else s
            return i + 1, x + k * (a - x), y + k * (x - y), z + k * (y - z), s_new

        c0 = (jnp.zeros((), jnp.int32), *(jnp.zeros(()) for _ in range(4)))
        return while_fast_primal(lambda c: c[0] < n, body, c0, 10_000)[3]

    def reference(a, n):  # the same recurrence, unrolled by a scan of n steps (n static)
        def step(c, _):
            x, y, z = c
            return (x + k * (a - x), y + k * (x - y), z + k * (y - z)), None

        return jax.lax.scan(step, (0.0, 0.0, 0.0), None, length=n)[0][2]

    for n in (5, 100, 2100):
        expected = jax.grad(reference)(0.8, n)
        for stop in (False, True):
            g = jax.jit(jax.grad(final_z), static_argnums=2)(0.8, jnp.asarray(n), stop)
            np.testing.assert_allclose(g, expected, rtol=1e-11, err_msg=f"n={n}, stop={stop}")


def test_re_running_adds_no_copy_of_the_body(sweep):
    """Runs longer than the forward checkpoints' reach are re-run through the sweep's own replay, at
    every level of re-running: a gradient's program holds as many copies of the loop's body whether
    its bound calls for no re-running (depth 0), one level (depth 1) or three (a large carry). The
    lowered program's loops, and its functions that compute the body's marker (an erf, which nothing
    else computes), are counted: a re-run loop would be one more copy of the body for XLA to compile
    (issue #40; before: 8 loops at depth 0, 10 at depth 1; 3 functions with an erf at depths 0 and 1,
    6 at depth 3)."""

    def program(max_steps, wide):
        def f(p):
            a, x0 = p[0], p[2]

            def body(c):
                return c[0] + 1, c[1] + H * (a - jax.scipy.special.erf(c[1])), c[2]

            c0 = (jnp.zeros((), jnp.int32), x0, jnp.zeros((wide,)))
            return while_fast_primal(lambda c: c[0] < 40, body, c0, max_steps)[1]

        c0 = (jnp.zeros((), jnp.int32), P[2], jnp.zeros((wide,)))
        depth = adjoint.LoopSpec(lambda c: c, lambda c: True, c0, 0, 0, max_steps).depth
        text = jax.jit(jax.grad(f)).lower(P).as_text()
        return depth, text.count("stablehlo.while"), text.count("erf")

    programs = [program(100, 0), program(200_000, 0), program(200_000, 600)]
    assert [d for d, _, _ in programs] == [0, 1, 3]
    assert programs[0][1] == programs[1][1], programs  # (depth 3's bookkeeping adds two small loops)
    assert len({erfs for _, _, erfs in programs}) == 1, programs


def test_few_inputs_are_differentiated_by_the_jacobian():
    """A loop differentiated in few scalars (here x0, a, b: three, the carry one scalar) is
    differentiated in reverse mode by its Jacobian: the gradient's program is one loop carrying a
    tangent per input (no checkpointing loop, no sweep), and its values are the closed form's. Nine
    inputs (past JACOBIAN_INPUTS for a small carry) take the sweep: more loops."""

    def wide_params(q):  # the relaxation with a = sum(q[:-2]) summed inside the loop: len(q) inputs
        def body(c):
            return c[0] + 1, c[1] + H * (jnp.sum(q[:-2]) - q[-2] * c[1])

        c0 = (jnp.zeros((), jnp.int32), q[-1])
        return while_fast_primal(lambda c: c[0] < 300, body, c0, 1000)[1]

    few = jnp.array([0.3, 0.4, 1.3, 0.2])  # a = 0.7 from two scalars: 4 inputs
    many = jnp.concatenate([jnp.full(7, 0.1), jnp.array([1.3, 0.2])])  # 9 inputs
    assert adjoint.JACOBIAN_INPUTS[0] in range(4, 9)
    counts = []
    for q in (few, many):
        g = jax.jit(jax.grad(wide_params))
        counts.append(g.lower(q).as_text().count("stablehlo.while"))
        dp = jax.grad(closed)(jnp.stack([jnp.sum(q[:-2]), q[-2], q[-1]]), 300.0)
        expected = jnp.concatenate([jnp.full(len(q) - 2, dp[0]), dp[1:]])
        np.testing.assert_allclose(g(q), expected, rtol=1e-11)
    assert counts[0] == 1 and counts[1] > 1, counts


class Linear4(js.LeafSystem):
    """x' = A x, four states, A's 16 entries the parameter: 20 inputs to the stepping loop."""

    def __init__(self):
        super().__init__("linear4")
        self.declare_continuous_state(4, default=[1.0, 0.5, -0.3, 0.2])
        self.declare_numeric_parameter(A4.reshape(-1).tolist())

    def do_calc_time_derivatives(self, c):
        return c.get_numeric_parameter(0).reshape(4, 4) @ c.get_continuous_state_vector()


A4 = -np.eye(4) + 0.4 * (np.tri(4, k=-1) - np.tri(4, k=-1).T) + 0.1
LINEAR4 = Linear4()


@pytest.mark.parametrize("how", ["stepping", "dense", "sweep"])
def test_runs_between_save_times_go_by_the_jacobian(how, monkeypatch):
    """With ``save_at`` the stepping loop runs once per save time, where the sweep's fixed price per
    run dominates (a 0.02 ms run's gradient took 2.4-3.6 ms): such loops take the Jacobian up to
    JACOBIAN_INPUTS_BETWEEN_SAVES inputs, and with dense output the interpolated step (its states and
    stage data) does not count among them. A 4-state linear system differentiated in its 16 matrix
    entries (20 inputs with the start state: past JACOBIAN_INPUTS, within the between-saves
    thresholds): the gradient's program holds no sweep, and the gradient of a loss on 9 saved states
    is the closed form's (expm) to 1e-7 relative. "sweep": the discrete adjoint forced, whose runs
    between save times are swept in segments of SEGMENT_BETWEEN_SAVES passes (save times a step or
    two apart, and 1.2 s apart: several segments), the same closed form."""
    if how == "sweep":
        monkeypatch.setattr(adjoint, "JACOBIAN_INPUTS", (0,) * len(adjoint.JACOBIAN_INPUTS))
        monkeypatch.setattr(adjoint, "JACOBIAN_INPUTS_BETWEEN_SAVES", (0,) * len(adjoint.JACOBIAN_INPUTS))
        clear_caches()  # (JAX caches the derivatives of programs it has traced)
    ts = jnp.concatenate([jnp.linspace(0.05, 0.35, 7), jnp.array([1.6, 3.0])])
    integ = js.RungeKutta5Integrator(target_accuracy=1e-12)
    ctx = LINEAR4.create_default_context()
    x0 = ctx.get_continuous_state_vector()

    def loss(a):
        r = js.simulate(LINEAR4, ctx.with_numeric_parameter(0, a), 3.0, integ, save_at=ts, dense_output=how == "dense")
        return jnp.sum(r.ys**2)

    def exact(a):
        return sum(jnp.sum((jax.scipy.linalg.expm(a.reshape(4, 4) * t) @ x0) ** 2) for t in np.asarray(ts))

    a0 = jnp.asarray(A4.reshape(-1))
    assert 20 > adjoint.JACOBIAN_INPUTS[0] or how == "sweep"
    grad = jax.jit(jax.grad(loss))
    assert ("jaxsys_loop_adjoint" in str(jax.make_jaxpr(jax.grad(loss))(a0))) == (how == "sweep")
    want = jax.grad(exact)(a0)
    got = grad(a0)
    if how == "sweep":
        clear_caches()
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-7 * float(jnp.max(jnp.abs(want))))


def test_runs_between_save_times_float32_batched_and_second_order():
    """The between-saves Jacobian and dense output's passed-through step in float32 under ``jit`` and
    ``vmap`` (three matrices: each member its own gradient, the closed form's to 1e-5 relative), and
    the second derivative of a dense loss (a spring's 30 interpolated saves in its stiffness: the
    closed form cos(sqrt(k) t), to 1e-7 relative)."""
    ts = jnp.linspace(0.25, 3.0, 12, dtype=jnp.float32)
    integ = js.RungeKutta5Integrator(target_accuracy=1e-5)
    ctx = LINEAR4.create_default_context(jnp.float32)
    x0 = np.asarray(ctx.get_continuous_state_vector(), np.float64)

    def loss(a):
        r = js.simulate(LINEAR4, ctx.with_numeric_parameter(0, a), 3.0, integ, save_at=ts, dense_output=True)
        return jnp.sum(r.ys**2)

    def exact(a):
        return sum(jnp.sum((jax.scipy.linalg.expm(a.reshape(4, 4) * t) @ x0) ** 2) for t in np.asarray(ts, np.float64))

    a0 = A4.reshape(-1)
    batch = np.stack([a0, 1.05 * a0, 0.95 * a0])
    g = jax.jit(jax.vmap(jax.grad(loss)))(jnp.asarray(batch, jnp.float32))
    assert g.dtype == jnp.float32
    for gi, a in zip(np.asarray(g, np.float64), batch):
        want = np.asarray(jax.grad(exact)(jnp.asarray(a)))
        np.testing.assert_allclose(gi, want, rtol=0, atol=1e-5 * np.max(np.abs(want)))

    from jaxsys.examples import SpringMassDamper

    spring = SpringMassDamper(1.0, 1.0, 0.0, has_input=False)
    ts2 = jnp.linspace(0.1, 3.0, 30)
    fine = js.RungeKutta5Integrator(max_step_size=0.1, target_accuracy=1e-10)

    def spring_loss(k):
        c = spring.create_default_context().with_continuous_state(jnp.array([1.0, 0.0]))
        c = c.with_numeric_parameter(0, jnp.stack([1.0, k, 0.0]))
        return jnp.sum(js.simulate(spring, c, 3.0, fine, save_at=ts2, dense_output=True).ys[:, 0] ** 2)

    want2 = jax.hessian(lambda k: jnp.sum(jnp.cos(jnp.sqrt(k) * ts2) ** 2))(1.3)
    np.testing.assert_allclose(jax.hessian(spring_loss)(1.3), want2, rtol=1e-7)


def _loops(fn, *args):
    """The number of while loops in ``fn``'s compiled program (XLA's text)."""
    return jax.jit(fn).lower(*args).compile().as_text().count(" while(")


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_forward_mode_with_the_value_runs_one_loop(dtype, sweep):
    """A loop differentiated by the sweep, in forward mode with its value used as well (``jax.jvp``,
    ``jax.jacfwd`` with ``has_aux``): value and tangent from one loop (loop_value_tangent_p), not the
    checkpointing run beside a replay (2.6x the tangent's cost on a hybrid system before). The value
    equals the plain run's exactly, the tangent the closed form's; reverse mode (grad, vmap(grad),
    linearize) and reverse over forward keep their values."""
    p = P.astype(dtype)
    n = jnp.asarray(777)
    t = jnp.array([0.3, -0.2, 1.0], dtype)
    tol = 1e-10 if dtype == jnp.float64 else 2e-4
    f = lambda p: run(p, n)  # noqa: E731
    value, tangent = jax.jit(lambda p: jax.jvp(f, (p,), (t,)))(p)
    assert value == jax.jit(f)(p)  # (the same loop's values, to the last bit)
    exact = jax.jvp(lambda q: closed(q, 777.0), (P,), (t.astype(P.dtype),))[1]
    np.testing.assert_allclose(tangent, exact, rtol=tol)
    both = jax.jacfwd(lambda p: (lambda y: (y, y))(f(p)), has_aux=True)
    assert _loops(lambda p: jax.jvp(f, (p,), (t,)), p) == 1  # (3 before: the checkpointing run's too)
    assert _loops(both, p) == 1
    jac, aux = jax.jit(both)(p)
    assert aux == value
    grad_exact = jax.grad(closed)(P, 777.0)
    np.testing.assert_allclose(jac, grad_exact, rtol=tol)
    np.testing.assert_allclose(jax.jit(jax.grad(f))(p), grad_exact, rtol=tol)
    lin_value, lin = jax.linearize(f, p)
    assert lin_value == value
    np.testing.assert_allclose(lin(t), exact, rtol=tol)
    # a batch of trip counts (values batched) and of directions (values shared)
    ns = jnp.array([5, 777, 3000])
    vs, ts = jax.jit(jax.vmap(lambda n: jax.jvp(lambda p: run(p, n), (p,), (t,))))(ns)
    for i, k in enumerate([5, 777, 3000]):
        assert vs[i] == jax.jit(lambda p, k=k: run(p, jnp.asarray(k)))(p)
        want = jax.jvp(lambda q, k=k: closed(q, float(k)), (P,), (t.astype(P.dtype),))[1]
        np.testing.assert_allclose(ts[i], want, rtol=tol)
    # reverse over forward: d/dp of the directional derivative (the Hessian of the closed form times t)
    hvp = jax.jit(jax.grad(lambda p: jax.jvp(f, (p,), (t,))[1]))(p)
    np.testing.assert_allclose(hvp, jax.hessian(closed)(P, 777.0) @ t.astype(P.dtype), rtol=10 * tol, atol=1e-12)
