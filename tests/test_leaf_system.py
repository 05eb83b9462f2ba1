"""LeafSystem declarations, contexts, ports, calculations and their errors."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from models import Everything

import jaxsys as js
from jaxsys.examples import Pendulum, SpringMassDamper


def test_declarations_and_default_context():
    s = Everything()
    ctx = s.create_default_context()
    assert isinstance(ctx, js.LeafContext)
    assert float(ctx.get_time()) == 0.0 and ctx.get_time().dtype == jnp.float64
    cs = ctx.get_continuous_state()
    assert (cs.num_q, cs.num_v, cs.num_z) == (2, 1, 1)
    np.testing.assert_array_equal(cs.get_generalized_position(), [1.0, 2.0])
    np.testing.assert_array_equal(cs.get_generalized_velocity(), [3.0])
    np.testing.assert_array_equal(cs.get_misc_continuous_state(), [4.0])
    assert ctx.num_discrete_state_groups() == 2
    np.testing.assert_array_equal(ctx.get_discrete_state(0), [0.0, 0.0])
    np.testing.assert_array_equal(ctx.get_discrete_state(1), [7.0, 8.0, 9.0])
    assert int(s.d1) == 1 and isinstance(s.d1, js.DiscreteStateIndex)
    assert ctx.num_abstract_states() == 1
    assert ctx.get_abstract_state(0)["count"] == 0
    np.testing.assert_array_equal(ctx.get_numeric_parameter(0), [2.0, 3.0])
    assert float(ctx.get_abstract_parameter(0)["scale"]) == 1.5
    assert ctx.num_input_ports() == 2 and s.num_output_ports() == 6
    assert s.get_num_total_inputs() == 1  # abstract ports have size 0
    assert s.get_num_total_outputs() == 2 + 1 + 4 + 3
    assert not ctx.is_stateless() and not ctx.has_only_continuous_state()


def test_plain_size_continuous_state_is_misc():
    class Z(js.LeafSystem):
        def __init__(self):
            super().__init__("z")
            self.declare_continuous_state(3)

        def do_calc_time_derivatives(self, context):
            return -context.get_continuous_state_vector()

    cs = Z().create_default_context().get_continuous_state()
    assert (cs.num_q, cs.num_v, cs.num_z) == (0, 0, 3)


def test_float32_context():
    p = Pendulum()
    ctx = p.create_default_context(jnp.float32)
    ctx = p.get_input_port(0).fix_value(ctx, [0.0])
    assert ctx.get_continuous_state_vector().dtype == jnp.float32
    ctx = ctx.with_continuous_state(jnp.array([1.0, 0.0]))
    xdot = p.calc_time_derivatives(ctx).x
    assert xdot.dtype == jnp.float32
    np.testing.assert_allclose(xdot, [0.0, -9.81 * np.sin(1.0)], rtol=1e-6)


def test_functional_setters_return_new_contexts():
    s = Everything()
    ctx = s.create_default_context()
    c2 = (
        ctx.with_time(1.5)
        .with_continuous_state(jnp.arange(4.0))
        .with_discrete_state(1, jnp.ones(3))
        .with_abstract_state(0, {"count": jnp.array(3), "pos": jnp.ones(2)})
        .with_numeric_parameter(0, [5.0, 6.0])
    )
    # the original is unchanged
    np.testing.assert_array_equal(ctx.get_continuous_state_vector(), [1.0, 2.0, 3.0, 4.0])
    assert float(ctx.get_time()) == 0.0
    assert float(c2.get_time()) == 1.5
    np.testing.assert_array_equal(c2.get_continuous_state_vector(), [0.0, 1.0, 2.0, 3.0])
    np.testing.assert_array_equal(c2.get_discrete_state(1), [1.0, 1.0, 1.0])
    assert int(c2.get_abstract_state(0)["count"]) == 3
    np.testing.assert_array_equal(c2.get_numeric_parameter(0), [5.0, 6.0])
    # set_default_context restores state and parameters, keeps time
    c3 = s.set_default_context(c2)
    np.testing.assert_array_equal(c3.get_continuous_state_vector(), [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(c3.get_numeric_parameter(0), [2.0, 3.0])
    assert float(c3.get_time()) == 1.5
    # whole-state round trip
    c4 = ctx.with_state(c2.get_state())
    assert eqx.tree_equal(c4.get_state(), c2.get_state())


def test_setter_errors_name_system_and_sizes():
    p = Pendulum()
    ctx = p.create_default_context()
    with pytest.raises(
        js.StateError,
        match=r"continuous state of System ::pendulum \(Pendulum\) has size 2 "
        r"\(num_q=1, num_v=1, num_z=0\); the value given has shape \(1,\)",
    ):
        ctx.with_continuous_state(jnp.zeros(1))
    with pytest.raises(js.StateError, match=r"Numeric parameter 0 of System ::pendulum .* shape \(4,\).*\(2,\)"):
        ctx.with_numeric_parameter(0, [1.0, 2.0])
    with pytest.raises(js.StateError, match=r"Discrete state group 0 set on System ::pendulum .* 0 group"):
        ctx.with_discrete_state(0, [1.0])
    s = Everything()
    c = s.create_default_context()
    with pytest.raises(js.StateError, match=r"Abstract state 0 of System ::everything .*structure"):
        c.with_abstract_state(0, {"count": jnp.array(1)})


def test_fix_value_and_eval():
    p = Pendulum()
    ctx = p.create_default_context()
    with pytest.raises(
        js.InputPortNotConnectedError,
        match=r"InputPort\[0\] \(tau\) of System ::pendulum \(Pendulum\) is neither connected nor fixed",
    ):
        p.calc_time_derivatives(ctx)
    ctx = p.get_input_port("tau").fix_value(ctx, 2.0)  # scalar accepted for size 1
    np.testing.assert_array_equal(p.get_input_port(0).eval(ctx), [2.0])
    assert p.get_input_port(0).has_value(ctx)
    with pytest.raises(
        js.PortError,
        match=r"expected a vector of size 1 for InputPort\[0\] \(tau\) of System ::pendulum .*shape \(2,\)",
    ):
        p.get_input_port(0).fix_value(ctx, [1.0, 2.0])
    s = Everything()
    c = s.create_default_context()
    with pytest.raises(js.PortError, match=r"expected an abstract value like .* for InputPort\[1\] \(cmd\)"):
        s.get_input_port("cmd").fix_value(c, {"other": 1.0})
    c = s.get_input_port("cmd").fix_value(c, {"gain": jnp.array(2.0)})
    assert float(s.get_output_port("info").eval(c)["s"]) == 3.0


def test_outputs_and_state_output_ports():
    s = Everything()
    ctx = s.create_default_context()
    ctx = s.get_input_port(0).fix_value(ctx, [2.0])
    ctx = s.get_input_port(1).fix_value(ctx, {"gain": jnp.array(1.0)})
    out = s.calc_output(ctx)
    s.check_valid_output(out)
    np.testing.assert_array_equal(out.get_vector_data(0), [4.5, 6.5])  # p*u + 0.5
    np.testing.assert_array_equal(out.get_vector_data(1), [2.0])
    np.testing.assert_array_equal(out.get_vector_data(3), [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(out.get_vector_data(4), [7.0, 8.0, 9.0])
    assert int(out.get_data(5)["count"]) == 0
    alloc = s.allocate_output()
    assert alloc.num_ports() == 6 and alloc.get_vector_data(0).shape == (2,)


def test_output_calc_returning_wrong_shape_is_reported():
    class Bad(js.LeafSystem):
        def __init__(self):
            super().__init__("bad")
            self.declare_vector_output_port("y", 2, lambda ctx: jnp.zeros(3))

    b = Bad()
    with pytest.raises(js.PortError, match=r"OutputPort\[0\] \(y\) of System ::bad .*size 2.*shape \(3,\)"):
        b.get_output_port(0).eval(b.create_default_context())


def test_derivative_shape_error_and_missing_override():
    class Bad(js.LeafSystem):
        def __init__(self):
            super().__init__("bad")
            self.declare_continuous_state(2)

        def do_calc_time_derivatives(self, context):
            return jnp.zeros(3)

    b = Bad()
    with pytest.raises(js.StateError, match=r"do_calc_time_derivatives of System ::bad \(Bad\) returned shape \(3,\)"):
        b.calc_time_derivatives(b.create_default_context())

    class NoOverride(js.LeafSystem):
        def __init__(self):
            super().__init__("lazy")
            self.declare_continuous_state(1)

    n = NoOverride()
    with pytest.raises(js.JaxsysError, match="does not override do_calc_time_derivatives"):
        n.calc_time_derivatives(n.create_default_context())


def test_declaration_errors():
    class Dup(js.LeafSystem):
        def __init__(self):
            super().__init__("dup")
            self.declare_vector_input_port("u", 1)
            self.declare_vector_input_port("u", 2)

    with pytest.raises(js.DeclarationError, match=r"System ::dup \(Dup\) already has an input port named 'u'"):
        Dup()

    class TwoStates(js.LeafSystem):
        def __init__(self):
            super().__init__("two")
            self.declare_continuous_state(1)
            self.declare_continuous_state(1)

    with pytest.raises(js.DeclarationError, match="already declared its continuous state"):
        TwoStates()

    class BadParam(js.LeafSystem):
        def __init__(self):
            super().__init__("bp")
            self.declare_numeric_parameter(np.zeros((2, 2)))

    with pytest.raises(js.DeclarationError, match=r"numeric parameter is a vector; got shape \(2, 2\)"):
        BadParam()

    class NotCallable(js.LeafSystem):
        def __init__(self):
            super().__init__("nc")
            self.declare_vector_output_port("y", 1, 3.0)

    with pytest.raises(js.DeclarationError, match=r"Output port 'y' of System ::nc .*calc must be a function"):
        NotCallable()


def test_default_port_names_and_lookup_errors():
    class Anon(js.LeafSystem):
        def __init__(self):
            super().__init__("anon")
            self.declare_vector_input_port(None, 1)
            self.declare_vector_input_port(None, 1)
            self.declare_vector_output_port(None, 1, lambda c: jnp.zeros(1))

    a = Anon()
    assert [a.get_input_port(i).get_name() for i in range(2)] == ["u0", "u1"]
    assert a.get_output_port().get_name() == "y0"
    with pytest.raises(js.PortError, match=r"has no input port named 'v'; its input ports are \['u0', 'u1'\]"):
        a.get_input_port("v")
    with pytest.raises(js.PortError, match="has 2 input ports; give an index or a name"):
        a.get_input_port()
    with pytest.raises(js.PortError, match="index 5 is out of range"):
        a.get_output_port(5)


def test_direct_feedthrough_found_by_tracing_and_declared():
    s = Everything()
    # y reads u (input 0); free reads only state; info reads cmd (input 1); state ports none
    assert s.get_direct_feedthroughs() == frozenset({(0, 0), (1, 2)})
    assert s.has_direct_feedthrough(0, 0) and not s.has_direct_feedthrough(1, 0)
    assert s.has_direct_feedthrough(2) and not s.has_direct_feedthrough(1)
    assert s.has_any_direct_feedthrough()

    class Declared(js.LeafSystem):
        def __init__(self):
            super().__init__("declared")
            self.declare_vector_input_port("u", 1)
            self.declare_vector_output_port("y", 1, lambda c: jnp.zeros(1), direct_feedthrough=True)

    assert Declared().get_direct_feedthroughs() == frozenset({(0, 0)})
    assert not Pendulum().has_any_direct_feedthrough()

    class PythonBranch(js.LeafSystem):  # cannot be traced abstractly: conservative answer
        def __init__(self):
            super().__init__("branchy")
            self.declare_vector_input_port("u", 1)
            self.declare_vector_output_port("y", 1, self.calc)

        def calc(self, context):
            u = self.get_input_port(0).eval(context)
            return u if float(u[0]) > 0 else -u

    assert PythonBranch().get_direct_feedthroughs() == frozenset({(0, 0)})


def test_energies_against_drake_reference(drake_x4):
    p = Pendulum()
    ctx = p.get_input_port(0).fix_value(p.create_default_context(), [0.0])
    for row in drake_x4["states"]:
        c = ctx.with_continuous_state(jnp.array([row["theta"], row["thetadot"]]))
        np.testing.assert_allclose(p.calc_potential_energy(c), row["potential"], rtol=0, atol=1e-12)
        np.testing.assert_allclose(p.calc_kinetic_energy(c), row["kinetic"], rtol=0, atol=1e-12)


def test_power_is_consistent_with_energy_rates():
    # Conservation law: d(PE)/dt = -P_c and d(KE + PE)/dt = P_nc, checked with jax.jvp.
    for plant, x in ((Pendulum(), [0.7, -1.3]), (SpringMassDamper(), [0.4, 2.0])):
        ctx = plant.get_input_port(0).fix_value(plant.create_default_context(), [0.3])
        ctx = ctx.with_continuous_state(jnp.array(x))
        xdot = plant.calc_time_derivatives(ctx).x

        def energy(xx, which, plant=plant, ctx=ctx):
            c = ctx.with_continuous_state(xx)
            pe = plant.calc_potential_energy(c)
            return pe if which == "pe" else pe + plant.calc_kinetic_energy(c)

        _, dpe = jax.jvp(lambda xx: energy(xx, "pe"), (jnp.array(x),), (xdot,))
        _, dtot = jax.jvp(lambda xx: energy(xx, "tot"), (jnp.array(x),), (xdot,))
        np.testing.assert_allclose(dpe, -plant.calc_conservative_power(ctx), rtol=1e-12)
        np.testing.assert_allclose(dtot, plant.calc_nonconservative_power(ctx), rtol=1e-12)
    # default powers are zero
    s = Everything()
    assert float(s.calc_nonconservative_power(s.create_default_context())) == 0.0


def test_velocity_qdot_maps():
    s = Everything()
    ctx = s.create_default_context()
    np.testing.assert_array_equal(s.map_velocity_to_qdot(ctx, jnp.array([3.0])), [3.0, 6.0])
    np.testing.assert_array_equal(s.map_qdot_to_velocity(ctx, jnp.array([3.0, 6.0])), [3.0])
    p = Pendulum()
    pc = p.create_default_context()
    np.testing.assert_array_equal(p.map_velocity_to_qdot(pc, jnp.array([2.5])), [2.5])
    with pytest.raises(
        js.StateError, match=r"System ::pendulum \(Pendulum\) has num_v=1; the velocity given has shape \(2,\)"
    ):
        p.map_velocity_to_qdot(pc, jnp.zeros(2))


def test_utility_methods():
    p = Pendulum()
    ctx = p.create_default_context().with_continuous_state(jnp.array([0.1, 0.2]))
    v = p.copy_continuous_state_vector(ctx)
    np.testing.assert_array_equal(v, [0.1, 0.2])
    assert p.get_memory_object_name().startswith("jaxsys/Pendulum@")
    assert p.get_system_id_string() == "::pendulum (Pendulum)"
    p.check_valid_context(ctx)
    assert p.allocate_time_derivatives().x.shape == (2,)
    assert p.allocate_input_vector(p.get_input_port(0)).shape == (1,)
    assert p.to_autodiff_xd() is p and p.to_symbolic() is p
    ctx2 = p.allocate_freestanding_inputs(ctx)
    np.testing.assert_array_equal(p.get_input_port(0).eval(ctx2), [0.0])
    # fix_input_ports_from: copy the input values of one context into another system's context
    q = Pendulum(name="other")
    src = p.get_input_port(0).fix_value(ctx, [4.0])
    tgt = q.fix_input_ports_from(p, src, q.create_default_context(jnp.float32))
    assert q.get_input_port(0).eval(tgt).dtype == jnp.float32
    np.testing.assert_array_equal(q.get_input_port(0).eval(tgt), [4.0])


def test_constraint_equation_api():
    class Circle(js.LeafSystem):
        """q on the unit circle: g = |q|^2 - 1."""

        def __init__(self):
            super().__init__("circle")
            self.declare_continuous_state(2, 2, 0)

        def do_calc_time_derivatives(self, context):
            x = context.get_continuous_state_vector()
            return jnp.concatenate([x[2:], -x[:2]])

        def do_eval_constraint_equations(self, context):
            q = context.get_continuous_state_vector()[:2]
            return jnp.array([q @ q - 1.0])

    c = Circle()
    ctx = c.create_default_context().with_continuous_state(jnp.array([0.6, 0.8, -0.8, 0.6]))
    assert c.get_num_constraint_equations(ctx) == 1
    np.testing.assert_allclose(c.eval_constraint_equations(ctx), [0.0], atol=1e-15)
    # gdot = 2 q . qdot = 2 q . v = 0 for a tangent velocity
    np.testing.assert_allclose(c.eval_constraint_equations_dot(ctx), [0.0], atol=1e-15)
    ctx2 = ctx.with_continuous_state(jnp.array([0.6, 0.8, 1.0, 0.0]))
    np.testing.assert_allclose(c.eval_constraint_equations_dot(ctx2), [1.2], rtol=1e-14)
    J = jnp.array([[1.2, 1.6]])
    np.testing.assert_allclose(c.calc_velocity_change_from_constraint_impulses(ctx, J, jnp.array([2.0])), [2.4, 3.2])
    np.testing.assert_allclose(c.calc_constraint_error_norm(ctx, jnp.array([3.0, 4.0])), 5.0)


def test_system_constraints_report():
    class Limited(js.LeafSystem):
        def __init__(self):
            super().__init__("limited")
            self.declare_continuous_state(1, 1, 0)
            self.declare_inequality_constraint(
                lambda ctx: ctx.get_continuous_state_vector()[:1], [-1.0], [1.0], "joint limit"
            )
            self.declare_equality_constraint(self.calc_eq, 1, "velocity zero")

        def calc_eq(self, context):
            return context.get_continuous_state_vector()[1:]

        def do_calc_time_derivatives(self, context):
            return jnp.zeros(2)

    s = Limited()
    ctx = s.create_default_context()
    assert s.num_constraints() == 2
    assert s.get_constraint(0).description() == "joint limit"
    assert s.get_constraint(1).is_equality_constraint()
    assert s.check_system_constraints_satisfied(ctx)
    bad = ctx.with_continuous_state(jnp.array([1.5, 0.25]))
    report = s.check_constraints(bad)
    assert not report
    assert [c.description() for c in report.violated()] == ["joint limit", "velocity zero"]
    text = str(report)
    assert "[VIOLATED] joint limit on ::limited" in text and "violation 0.5" in text
    assert "violation 0.25" in text
    with pytest.raises(js.ConstraintError, match="lower > upper"):
        js.SystemConstraint(lambda c: 0.0, [1.0], [0.0], "bad")
