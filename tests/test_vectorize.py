"""Groups of identical leaves are evaluated with one vmap: results equal leaf-by-leaf evaluation."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsys as js
from jaxsys.examples import Pendulum
from jaxsys.framework.vectorize import MIN_GROUP_SIZE, find_groups


class Scaled(js.LeafSystem):
    """xdot = A @ (u - x) with a matrix field A (an array on the system, not in the context)."""

    A: jax.Array

    def __init__(self, A, name):
        super().__init__(name)
        self.A = jnp.asarray(A)
        self.declare_continuous_state(2)
        self.declare_vector_input_port("u", 2)
        self.declare_vector_output_port("y", 2, lambda c: c.get_continuous_state_vector())

    def do_calc_time_derivatives(self, context):
        x = context.get_continuous_state_vector()
        return self.A @ (self.get_input_port(0).eval(context) - x)


def bank(n=6):
    b = js.DiagramBuilder()
    pends = [b.add_named_system(f"p{i}", Pendulum(length=1.0 + 0.1 * i)) for i in range(n)]
    src = b.add_named_system("src", js.ConstantVectorSource([0.3]))
    for i, p in enumerate(pends):
        if i % 2:
            b.connect(src.get_output_port(), p.get_input_port())  # from a singleton
        elif i == 0:
            b.export_input(p.get_input_port(), "tau0")  # from the diagram's input
        else:
            # torque = 0.5 * previous pendulum's angle, through two direct-feedthrough singletons
            gain = b.add_named_system(f"g{i}", js.Gain(0.5, 2))
            pick = b.add_named_system(f"pick{i}", Pick())
            b.connect(pends[i - 1].get_output_port(), gain.get_input_port())
            b.connect(gain.get_output_port(), pick.get_input_port())
            b.connect(pick.get_output_port(), p.get_input_port())
    scaled = [b.add_named_system(f"s{i}", Scaled(np.eye(2) * (i + 1), f"s{i}")) for i in range(MIN_GROUP_SIZE)]
    for i, s in enumerate(scaled):
        b.connect(pends[i].get_output_port(), s.get_input_port())
    b.export_output(scaled[-1].get_output_port(), "y")
    return b.build("bank"), pends, scaled


class Pick(js.LeafSystem):
    def __init__(self):
        super().__init__("pick")
        self.declare_vector_input_port("u", 2)
        self.declare_vector_output_port("y", 1, lambda c: self.get_input_port(0).eval(c)[:1])


def test_groups_found_and_derivatives_match_leaf_by_leaf():
    d, pends, scaled = bank()
    leaves = [d._system_at(p) for p in d._flat().leaf_paths]
    groups = find_groups(leaves)
    kinds = sorted(type(leaves[g[0]]).__name__ for g in groups)
    assert kinds == ["Pendulum", "Scaled"]  # Gains and Picks are fewer than MIN_GROUP_SIZE
    ctx = d.create_default_context()
    ctx = d.get_input_port("tau0").fix_value(ctx, [-0.7])
    key = jax.random.PRNGKey(3)
    ctx = ctx.with_continuous_state(jax.random.normal(key, (ctx.num_continuous_states(),)))
    xdot = d.calc_time_derivatives(ctx)
    # expected: every leaf alone, with its inputs as the diagram gives them, in Drake's order
    expected = ctx.with_continuous_state(jnp.zeros_like(xdot.x))
    for sys in pends + scaled:
        sub = d.get_subsystem_context(ctx, sys)
        expected = d.set_subsystem_context(expected, sys, sub.with_continuous_state(sys.calc_time_derivatives(sub).x))
    np.testing.assert_allclose(xdot.x, expected.get_continuous_state_vector(), rtol=1e-13, atol=1e-15)
    # and through simulate's path (state from the x vector, stacked contexts prepared once)
    f = d._derivative_function(ctx)
    np.testing.assert_allclose(f(ctx.time, ctx.get_continuous_state_vector()), xdot.x, rtol=1e-13, atol=1e-15)
    # outputs of grouped leaves
    np.testing.assert_allclose(
        d.get_output_port("y").eval(ctx), d.get_subsystem_context(ctx, scaled[-1]).get_continuous_state_vector()
    )


def test_vectorised_simulation_gradient_matches_finite_differences():
    d, pends, _ = bank()
    base = d.get_input_port("tau0").fix_value(d.create_default_context(), [0.2])
    base = base.with_continuous_state(jnp.linspace(0.1, 0.5, base.num_continuous_states()))
    integ = js.RungeKutta4Integrator(max_step_size=0.01)
    length_idx = 0  # numeric parameter 0 = pendulum p0's [m, l, b, g]

    @eqx.filter_jit
    def final(l0):
        c = base.with_numeric_parameter(length_idx, jnp.stack([1.0, l0, 0.1, 9.81]))
        return js.simulate(d, c, 0.5, integ).context.get_continuous_state_vector()

    g = jax.jacfwd(final)(1.0)
    r = jax.jacrev(final)(1.0)
    fd = (final(1.0 + 1e-6) - final(1.0 - 1e-6)) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(r, g, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n", [MIN_GROUP_SIZE - 1, MIN_GROUP_SIZE + 5])
def test_chain_equal_with_and_without_grouping(n):
    b = js.DiagramBuilder()
    prev = b.add_named_system("one", js.ConstantVectorSource([1.0])).get_output_port()
    for i in range(n):
        lag = b.add_named_system(f"lag{i}", js.FirstOrderLowPassFilter(1.0 + 0.1 * i, 1))
        b.connect(prev, lag.get_input_port())
        prev = lag.get_output_port()
    d = b.build()
    assert bool(find_groups([d._system_at(p) for p in d._flat().leaf_paths])) == (n >= MIN_GROUP_SIZE)
    r = js.simulate(d, d.create_default_context(), 3.0, js.RungeKutta4Integrator(max_step_size=0.01))
    # exact solution is hard with distinct time constants; compare with a hand-written RK4
    taus = 1.0 + 0.1 * jnp.arange(n)

    def f(x):
        return (jnp.concatenate([jnp.ones(1), x[:-1]]) - x) / taus

    def step(x, _):
        k1 = f(x)
        k2 = f(x + 0.005 * k1)
        k3 = f(x + 0.005 * k2)
        k4 = f(x + 0.01 * k3)
        return x + 0.01 / 6 * (k1 + 2 * k2 + 2 * k3 + k4), None

    x, _ = jax.lax.scan(step, jnp.zeros(n), None, length=300)
    np.testing.assert_allclose(r.context.get_continuous_state_vector(), x, rtol=1e-12, atol=1e-14)


# ----- heterogeneous diagrams: classes with the same code group; distinct code is cut with one split


def _distinct_lag_class(i):
    """A lag class whose derivative is its own code object (x' = (u - x) * k_i, k_i a literal)."""
    src = f"""
class DLag{i}(js.LeafSystem):
    def __init__(self):
        super().__init__()
        self.declare_continuous_state(1)
        self.declare_vector_input_port("u", 1)
        self.declare_vector_output_port("y", 1, lambda c: c.get_continuous_state_vector(), direct_feedthrough=False)

    def do_calc_time_derivatives(self, c):
        return (self.get_input_port(0).eval(c) - c.get_continuous_state_vector()) * {1.0 + 0.05 * i!r}
"""
    ns = {"js": js}
    exec(src, ns)
    return ns[f"DLag{i}"]


class _Faster(js.FirstOrderLowPassFilter):
    """Overrides the derivative: must never be evaluated with another class's code."""

    def do_calc_time_derivatives(self, context):
        return 2.0 * super().do_calc_time_derivatives(context)


def _chain(blocks):
    b = js.DiagramBuilder()
    prev = b.add_named_system("one", js.ConstantVectorSource([1.0])).get_output_port()
    for i, blk in enumerate(blocks):
        lag = b.add_named_system(f"lag{i}", blk)
        b.connect(prev, lag.get_input_port(0))
        prev = lag.get_output_port(0)
    return b.build()


def _rk4_chain(rates, t_final=3.0, h=0.01, dtype=jnp.float64):
    rates = jnp.asarray(rates, dtype)

    def f(x):
        return (jnp.concatenate([jnp.ones(1, dtype), x[:-1]]) - x) * rates

    def step(x, _):
        k1 = f(x)
        k2 = f(x + h / 2 * k1)
        k3 = f(x + h / 2 * k2)
        k4 = f(x + h * k3)
        return x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), None

    return jax.lax.scan(step, jnp.zeros(len(rates), dtype), None, length=round(t_final / h))[0]


def test_classes_with_the_same_code_group_and_an_override_does_not():
    renamed = [type(f"Renamed{i}", (js.FirstOrderLowPassFilter,), {})(1.0, 1) for i in range(6)]
    blocks = renamed[:3] + [_Faster(1.0, 1) for _ in range(MIN_GROUP_SIZE)] + renamed[3:]
    d = _chain(blocks)
    leaves = [d._system_at(p) for p in d._flat().leaf_paths]
    groups = sorted(sorted(type(leaves[i]).__name__ for i in g) for g in find_groups(leaves))
    assert groups == sorted([["_Faster"] * MIN_GROUP_SIZE, sorted(f"Renamed{i}" for i in range(6))])
    r = js.simulate(d, d.create_default_context(), 3.0, js.RungeKutta4Integrator(max_step_size=0.01))
    rates = [1.0] * 3 + [2.0] * MIN_GROUP_SIZE + [1.0] * 3
    np.testing.assert_allclose(r.context.get_continuous_state_vector(), _rk4_chain(rates), rtol=1e-12, atol=1e-14)


def test_classes_made_from_closures_group_only_with_equal_captured_values():
    def make(k):
        def deriv(self, context):
            return (self.get_input_port(0).eval(context) - context.get_continuous_state_vector()) * k

        return type("Lag", (js.FirstOrderLowPassFilter,), {"do_calc_time_derivatives": deriv})

    blocks = [make(1.0)(1.0, 1) for _ in range(4)] + [make(3.0)(1.0, 1) for _ in range(4)]
    d = _chain(blocks)
    leaves = [d._system_at(p) for p in d._flat().leaf_paths]
    assert sorted(map(sorted, find_groups(leaves))) == [[1, 2, 3, 4], [5, 6, 7, 8]]  # (leaf 0: the source)
    r = js.simulate(d, d.create_default_context(), 3.0, js.RungeKutta4Integrator(max_step_size=0.01))
    np.testing.assert_allclose(
        r.context.get_continuous_state_vector(), _rk4_chain([1.0] * 4 + [3.0] * 4), rtol=1e-12, atol=1e-14
    )


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_distinct_code_chain_values_and_gradients(dtype):
    """12 leaves of distinct code (no grouping): the state is cut with one split, whose transpose is one
    concatenate; values against a hand-written RK4 and reverse mode against forward mode and central
    differences of the same run."""
    n = 12
    d = _chain([_distinct_lag_class(i)() for i in range(n)])
    assert find_groups([d._system_at(p) for p in d._flat().leaf_paths]) == []
    rates = [1.0 + 0.05 * i for i in range(n)]
    ctx0 = d.create_default_context(dtype)
    integ = js.RungeKutta4Integrator(max_step_size=0.01)

    def final(x0):
        return js.simulate(d, ctx0.with_continuous_state(x0), 3.0, integ).context.get_continuous_state_vector()

    x0 = jnp.zeros(n, dtype)
    tol = dict(rtol=1e-12, atol=1e-14) if dtype == jnp.float64 else dict(rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(final(x0), _rk4_chain(rates, dtype=dtype), **tol)
    w = jnp.linspace(1.0, 2.0, n, dtype=dtype)
    g_rev = jax.grad(lambda x: jnp.dot(w, final(x)))(x0)
    g_fwd = jax.jacfwd(final)(x0).T @ w
    np.testing.assert_allclose(g_rev, g_fwd, **tol)
    # batched: vmap over initial states equals the runs one by one, and the gradient of the batch's sum
    x0s = jnp.stack([x0, x0 + 0.5, x0 - 0.25])
    np.testing.assert_allclose(jax.vmap(final)(x0s), jnp.stack([final(x) for x in x0s]), **tol)
    g_batch = jax.grad(lambda xs: jnp.sum(jax.vmap(final)(xs) @ w))(x0s)
    np.testing.assert_allclose(g_batch, jnp.stack([g_rev] * 3), **tol)  # linear dynamics: same gradient
    if dtype == jnp.float64:
        e = 1e-6
        fd = jnp.stack(
            [(jnp.dot(w, final(x0.at[i].add(e))) - jnp.dot(w, final(x0.at[i].add(-e)))) / (2 * e) for i in range(n)]
        )
        np.testing.assert_allclose(g_rev, fd, rtol=1e-7, atol=1e-9)


def test_many_small_loop_constants_are_packed_and_values_and_gradients_unchanged():
    from jaxsys.analysis.loops import pack_arrays, while_fast_primal

    arrays = [jnp.full((2,), float(i), jnp.float64) for i in range(10)] + [
        jnp.arange(3, dtype=jnp.int32),
        jnp.ones((5000,)),
    ]
    packed, unpack, _ = pack_arrays(arrays)
    assert len(packed) == 3  # the big array, one float64 vector, one int32 vector
    for a, b in zip(arrays, unpack(packed)):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)

    def run(ks):
        # closes over 10 small traced arrays: the loop carries them packed
        rates = [ks[i] * jnp.ones(1) for i in range(10)]

        def body(c):
            i, x = c
            return i + 1, x + 0.01 * sum(r * x for r in rates)

        return while_fast_primal(lambda c: c[0] < 50, body, (0, jnp.ones(1)), max_steps=64)[1][0]

    ks = jnp.linspace(0.1, 1.0, 10)
    expected = (1 + 0.01 * jnp.sum(ks)) ** 50
    np.testing.assert_allclose(run(ks), expected, rtol=1e-12)
    np.testing.assert_allclose(jax.grad(run)(ks), 50 * 0.01 * (1 + 0.01 * jnp.sum(ks)) ** 49 * jnp.ones(10), rtol=1e-12)


def test_private_methods_are_plain_and_public_ones_stay_pytrees():
    import types

    d = _chain([js.FirstOrderLowPassFilter(1.0, 1) for _ in range(2)])
    assert isinstance(d._flat, types.MethodType)  # internals: no equinox BoundMethod (O(size) to make)
    # structural queries and declarations (no arrays in or out) are plain too
    for name in ("get_name", "num_input_ports", "get_input_port", "get_direct_feedthroughs", "validate_context"):
        assert isinstance(getattr(d, name), types.MethodType), name
    assert isinstance(js.FirstOrderLowPassFilter(1.0, 1).declare_continuous_state, types.MethodType)
    assert not isinstance(d.calc_time_derivatives, types.MethodType)  # equinox's pytree bound method
    ctx = d.create_default_context().with_continuous_state(jnp.array([0.5, 0.25]))
    np.testing.assert_allclose(
        eqx.filter_jit(d.calc_time_derivatives)(ctx).x, d.calc_time_derivatives(ctx).x, rtol=1e-15
    )
