"""Diagram contexts store the contexts of identical leaf subsystems stacked ("packs").

The storage must be invisible: every accessor, setter, id check, simulation and gradient behaves as if
each subsystem had its own context. These tests build diagrams whose identical leaves are packed and
compare against the same subsystems simulated one by one, or against closed forms.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsys as js
from jaxsys.examples import SpringMassDamper


STIFFNESS = [1.0, 2.0, 3.0, 4.0, 5.0]


def springs_and_lag():
    """Five free springs (packed: q, v each) and a lag driven by a constant (z)."""
    b = js.DiagramBuilder()
    springs = [b.add_named_system(f"s{i}", SpringMassDamper(1.0, 1.0, 0.1, has_input=False)) for i in range(5)]
    src = b.add_named_system("src", js.ConstantVectorSource([2.0]))
    lag = b.add_named_system("lag", js.FirstOrderLowPassFilter(0.5, 1))
    b.connect(src.get_output_port(), lag.get_input_port())
    d = b.build("bank")
    ctx = d.create_default_context()
    for i, (s, k) in enumerate(zip(springs, STIFFNESS)):
        sub = d.get_subsystem_context(ctx, s)
        sub = sub.with_numeric_parameter(0, jnp.array([1.0, k, 0.1])).with_continuous_state(jnp.array([1.0 + i, 0.0]))
        ctx = d.set_subsystem_context(ctx, s, sub)
    return d, springs, lag, ctx


def test_identical_leaves_are_stored_stacked_and_read_back_per_subsystem():
    d, springs, lag, ctx = springs_and_lag()
    assert len(ctx.packs) == 1 and len(ctx.packing[0]) == 5
    # a handful of arrays instead of one set per spring
    assert len(jax.tree_util.tree_leaves(ctx)) <= 12
    for i, s in enumerate(springs):
        sub = d.get_subsystem_context(ctx, s)
        s.validate_context(sub)  # each member carries its own system's id
        np.testing.assert_array_equal(sub.get_continuous_state_vector(), [1.0 + i, 0.0])
        np.testing.assert_array_equal(sub.get_numeric_parameter(0), [1.0, STIFFNESS[i], 0.1])
        assert float(sub.get_time()) == 0.0
    with pytest.raises(js.SystemMismatchError):
        springs[2].validate_context(d.get_subsystem_context(ctx, springs[3]))
    # Drake's diagram ordering: q of every leaf, then v of every leaf, then z
    x = ctx.get_continuous_state_vector()
    np.testing.assert_array_equal(x, [1, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0])
    cs = ctx.get_continuous_state()
    assert (cs.num_q, cs.num_v, cs.num_z) == (5, 5, 1)
    new = ctx.with_continuous_state(jnp.arange(11.0))
    for i, s in enumerate(springs):
        np.testing.assert_array_equal(d.get_subsystem_context(new, s).get_continuous_state_vector(), [i, 5 + i])
    np.testing.assert_array_equal(d.get_subsystem_context(new, lag).get_continuous_state_vector(), [10.0])
    assert jax.tree_util.tree_structure(new) == jax.tree_util.tree_structure(ctx)
    with pytest.raises(js.StateError, match="has size 11"):
        ctx.with_continuous_state(jnp.zeros(10))


def test_packed_diagram_simulates_like_its_subsystems_one_by_one():
    d, springs, lag, ctx = springs_and_lag()
    integ = js.RungeKutta4Integrator(max_step_size=1e-3)
    r = jax.jit(lambda c: js.simulate(d, c, 2.0, integ))(ctx)
    for s in springs:
        alone = d.get_subsystem_context(ctx, s)
        ref = js.simulate(s, alone, 2.0, integ).context.get_continuous_state_vector()
        got = d.get_subsystem_context(r.context, s).get_continuous_state_vector()
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)
    # the lag: y = 2 (1 - exp(-t / 0.5))
    y = d.get_subsystem_context(r.context, lag).get_continuous_state_vector()[0]
    np.testing.assert_allclose(y, 2.0 * (1.0 - np.exp(-2.0 / 0.5)), rtol=0, atol=1e-10)
    # the final context has the structure of the start: a valid start for the next call
    assert jax.tree_util.tree_structure(r.context) == jax.tree_util.tree_structure(ctx)


def test_gradient_with_respect_to_one_packed_members_parameter_matches_finite_differences():
    d, springs, _, ctx = springs_and_lag()
    integ = js.RungeKutta4Integrator(max_step_size=1e-2)

    def q3(k):
        sub = d.get_subsystem_context(ctx, springs[3])
        c = d.set_subsystem_context(ctx, springs[3], sub.with_numeric_parameter(0, jnp.stack([1.0, k, 0.1])))
        return js.simulate(d, c, 1.0, integ).context.get_continuous_state_vector()[3]

    g = jax.grad(q3)(4.0)
    eps = 1e-6
    fd = (q3(4.0 + eps) - q3(4.0 - eps)) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=1e-6)
    # and only member 3 depends on it
    grads = jax.jacfwd(
        lambda k: js.simulate(
            d,
            d.set_subsystem_context(
                ctx,
                springs[3],
                d.get_subsystem_context(ctx, springs[3]).with_numeric_parameter(0, jnp.stack([1.0, k, 0.1])),
            ),
            1.0,
            integ,
        ).context.get_continuous_state_vector()
    )(4.0)
    assert np.count_nonzero(np.asarray(grads)) == 2  # q3 and v3


def test_ids_are_cleared_by_astype_and_restored_by_set_from():
    d, springs, _, ctx = springs_and_lag()
    f32 = ctx.astype(jnp.float32)
    assert all(sub.get_system_id() == 0 for sub in f32.subcontexts)
    with pytest.raises(js.SystemMismatchError):
        d.validate_context(f32)
    back = d.create_default_context().set_from(f32)
    d.validate_context(back)
    np.testing.assert_allclose(back.get_continuous_state_vector(), ctx.get_continuous_state_vector())
    springs[4].validate_context(d.get_subsystem_context(back, springs[4]))


def test_a_member_whose_structure_changes_leaves_the_pack():
    # fixing a value on one member's (unconnected) input port changes that member's context structure:
    # it is stored on its own, the others stay packed, and every value is where it belongs
    b = js.DiagramBuilder()
    springs = [b.add_named_system(f"s{i}", SpringMassDamper(1.0, 1.0, 0.0)) for i in range(4)]
    d = b.build()
    ctx = d.create_default_context()
    for i, s in enumerate(springs):
        sub = s.get_input_port(0).fix_value(d.get_subsystem_context(ctx, s), [float(i)])
        ctx = d.set_subsystem_context(ctx, s, sub)
        if i == 0:
            assert len(ctx.packs[0].state.continuous_state.x) == 3  # member 0 left the pack
    # all four fixed: member 0 is loose (the plan is static), the other three stay packed
    r = js.simulate(d, ctx, 1.0, js.RungeKutta4Integrator(max_step_size=1e-3))
    for i, s in enumerate(springs):
        # q'' = -q + u with q(0)=0, v(0)=0: q = u (1 - cos t)
        q = d.get_subsystem_context(r.context, s).get_continuous_state_vector()[0]
        np.testing.assert_allclose(q, i * (1 - np.cos(1.0)), rtol=0, atol=1e-10)


class Sampler(js.LeafSystem):
    """Holds its input, sampled every 0.1 s (a discrete leaf that packs: its handler is a method)."""

    def __init__(self):
        super().__init__("sampler")
        held = self.declare_discrete_state(1)
        self.declare_vector_input_port("u", 1)
        self.declare_state_output_port("y", held)
        self.declare_periodic_discrete_update_event(0.1, 0.0, self.sample)

    def sample(self, context, discrete_state):
        return self.get_input_port(0).eval(context)


def test_discrete_updates_of_packed_members():
    b = js.DiagramBuilder()
    samplers = []
    for i in range(5):
        src = b.add_named_system(f"c{i}", js.ConstantVectorSource([float(i + 1)]))
        lag = b.add_named_system(f"lag{i}", js.FirstOrderLowPassFilter(0.25, 1))
        smp = b.add_named_system(f"smp{i}", Sampler())
        b.connect(src.get_output_port(), lag.get_input_port())
        b.connect(lag.get_output_port(), smp.get_input_port())
        samplers.append(smp)
    d = b.build()
    ctx = d.create_default_context()
    assert len(ctx.packs) == 3  # sources, lags, samplers
    r = js.simulate(d, ctx, 0.35, js.RungeKutta5Integrator(max_step_size=0.1, target_accuracy=1e-12))
    for i, smp in enumerate(samplers):
        held = d.get_subsystem_context(r.context, smp).get_discrete_state(0)[0]
        # the last sample was taken at t = 0.3 from y = c (1 - exp(-t / 0.25))
        np.testing.assert_allclose(held, (i + 1) * (1 - np.exp(-0.3 / 0.25)), rtol=0, atol=1e-10)
    # the diagram's discrete groups are the leaves' groups, in subsystem order
    assert r.context.num_discrete_state_groups() == 5
    for i in range(5):
        np.testing.assert_allclose(r.context.get_discrete_state(i), [(i + 1) * (1 - np.exp(-0.3 / 0.25))], atol=1e-10)


def test_nested_diagrams_with_packs_and_batches():
    # two copies of a sub-diagram holding four packed springs each, inside a parent diagram: the
    # parent's state is ordered [q of all 8, v of all 8]; a vmap batch over stacked contexts equals
    # separate runs
    def bank(name):
        b = js.DiagramBuilder()
        for i in range(4):
            b.add_named_system(f"s{i}", SpringMassDamper(1.0, 1.0, 0.2, has_input=False))
        return b.build(name)

    parent = js.DiagramBuilder()
    left, right = parent.add_system(bank("left")), parent.add_system(bank("right"))
    d = parent.build("parent")
    ctx = d.create_default_context()
    assert all(len(sub.packs) == 1 for sub in ctx.subcontexts)
    x0 = jnp.concatenate([jnp.arange(1.0, 9.0), jnp.zeros(8)])
    ctx = ctx.with_continuous_state(x0)
    for k, bank_sys in enumerate((left, right)):
        for i, s in enumerate(bank_sys.subsystems):
            got = d.get_subsystem_context(ctx, s).get_continuous_state_vector()
            np.testing.assert_array_equal(got, [4 * k + i + 1, 0])
    integ = js.RungeKutta4Integrator(max_step_size=1e-2)
    r = js.simulate(d, ctx, 1.0, integ)
    # each spring: q'' = -q - 0.2 q', the same for all, so the final state scales with q0
    one = js.simulate(
        left.subsystems[0],
        left.subsystems[0].create_default_context().with_continuous_state(jnp.array([1.0, 0.0])),
        1.0,
        integ,
    ).context.get_continuous_state_vector()
    x = r.context.get_continuous_state_vector()
    np.testing.assert_allclose(x[:8], one[0] * jnp.arange(1.0, 9.0), rtol=1e-12)
    np.testing.assert_allclose(x[8:], one[1] * jnp.arange(1.0, 9.0), rtol=1e-12)
    batch = js.stack_contexts([ctx, ctx.with_continuous_state(2 * x0)])
    rb = jax.vmap(lambda c: js.simulate(d, c, 1.0, integ).context.get_continuous_state_vector())(batch)
    np.testing.assert_allclose(rb[0], x, rtol=1e-12)
    np.testing.assert_allclose(rb[1], 2 * x, rtol=1e-12)


def test_state_of_one_block_is_read_and_replaced_without_an_array_operation():
    # a diagram whose continuous state is one leaf's (a pendulum + a stateless controller): its eager
    # accessors hand the stored array back as it is (no array operation, microseconds: #40 item 3);
    # a diagram of several blocks reads them in Drake's [q, v, z] order
    b = js.DiagramBuilder()
    plant = b.add_system(js.examples.Pendulum())
    gain = b.add_system(js.Gain(-2.0, 2))
    b.connect(plant.get_output_port("state"), gain.get_input_port(0))
    b.export_input(plant.get_input_port("tau"), "tau")
    d = b.build("one_block")
    x = jnp.array([0.3, -0.2])
    ctx = d.create_default_context().with_continuous_state(x)
    assert ctx.get_continuous_state_vector() is x
    assert ctx.with_continuous_state(2 * x).get_continuous_state_vector().tolist() == (2 * x).tolist()
    b = js.DiagramBuilder()
    springs = [b.add_system(SpringMassDamper(name=f"s{i}", has_input=False)) for i in range(2)]
    lone = b.add_system(js.examples.Pendulum(name="p"))
    b.export_input(lone.get_input_port("tau"), "tau")
    d2 = b.build("blocks")
    x2 = jnp.arange(6.0)
    ctx2 = d2.create_default_context().with_continuous_state(x2)
    np.testing.assert_array_equal(ctx2.get_continuous_state_vector(), x2)
    # (q of each leaf, then v: leaf by leaf within each part)
    assert [float(v) for v in d2.get_subsystem_context(ctx2, springs[1]).get_continuous_state_vector()] == [1.0, 4.0]
    assert [float(v) for v in d2.get_subsystem_context(ctx2, lone).get_continuous_state_vector()] == [2.0, 5.0]
