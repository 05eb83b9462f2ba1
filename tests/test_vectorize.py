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
