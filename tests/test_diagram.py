"""Diagrams: building, wiring, nesting, evaluation, errors, algebraic loops, graphviz."""

import shutil
import subprocess

import jax.numpy as jnp
import numpy as np
import pytest
from models import PD

import jaxsys as js
from jaxsys.examples import Pendulum


def closed_loop(name="diagram"):
    b = js.DiagramBuilder()
    plant = b.add_system(Pendulum())
    ctrl = b.add_system(PD())
    b.connect(plant.get_output_port("state"), ctrl.get_input_port("x"))
    b.connect(ctrl.get_output_port("u"), plant.get_input_port("tau"))
    b.export_output(plant.get_output_port("state"), "state")
    b.export_output(ctrl.get_output_port("u"), "u")
    return b.build(name), plant, ctrl


def test_closed_loop_evaluation_matches_hand_computation():
    d, plant, ctrl = closed_loop()
    ctx = d.create_default_context()
    x = jnp.array([0.3, -0.2])
    ctx = ctx.with_continuous_state(x)
    kp, kd = 5.0, 1.0
    tau = -kp * 0.3 - kd * -0.2
    expected = [-0.2, tau - 0.1 * -0.2 - 9.81 * np.sin(0.3)]
    np.testing.assert_allclose(d.calc_time_derivatives(ctx).x, expected, rtol=1e-14)
    np.testing.assert_allclose(d.get_output_port("u").eval(ctx), [tau], rtol=1e-14)
    np.testing.assert_allclose(d.get_output_port(0).eval(ctx), x)
    assert plant.get_path() == "::diagram::pendulum"
    assert d.get_path() == "::diagram"
    assert d.get_subsystem_by_name("pd") is ctrl
    assert d.get_connection_map()[plant.get_input_port(0)] is ctrl.get_output_port(0)
    # the closed loop is not an algebraic loop: the pendulum's output is not feedthrough
    assert d.get_direct_feedthroughs() == frozenset()


def test_subsystem_contexts():
    d, plant, ctrl = closed_loop()
    ctx = d.create_default_context().with_continuous_state(jnp.array([0.3, -0.2]))
    pc = d.get_subsystem_context(ctx, plant)
    # connected inputs carry their value in the diagram, as in Drake
    np.testing.assert_allclose(plant.get_input_port(0).eval(pc), [-1.3], rtol=1e-14)
    np.testing.assert_allclose(plant.calc_time_derivatives(pc).x, d.calc_time_derivatives(ctx).x)
    # set a subsystem context functionally
    cc = d.get_subsystem_context(ctx, ctrl).with_numeric_parameter(0, [10.0, 0.0])
    ctx2 = d.set_subsystem_context(ctx, ctrl, cc)
    np.testing.assert_allclose(d.get_output_port("u").eval(ctx2), [-3.0], rtol=1e-14)
    np.testing.assert_allclose(d.get_output_port("u").eval(ctx), [-1.3], rtol=1e-14)  # unchanged
    # diagram-level flattened parameters: pendulum's then pd's
    assert ctx2.num_numeric_parameter_groups() == 2
    np.testing.assert_array_equal(ctx2.get_numeric_parameter(1), [10.0, 0.0])
    # time propagates to every subcontext
    t_ctx = ctx.with_time(2.5)
    assert float(d.get_subsystem_context(t_ctx, plant).get_time()) == 2.5


def test_nested_diagrams_and_exported_inputs():
    # inner: pendulum with its torque exported; outer: constant source -> inner
    bi = js.DiagramBuilder()
    p = bi.add_system(Pendulum())
    bi.export_input(p.get_input_port("tau"), "torque")
    bi.export_output(p.get_output_port("state"), "x")
    inner = bi.build("inner")
    bo = js.DiagramBuilder()
    src = bo.add_named_system("src", js.ConstantVectorSource([2.0]))
    bo.add_system(inner)
    gain = bo.add_named_system("gain", js.Gain(3.0, 2))
    bo.connect(src.get_output_port(), inner.get_input_port("torque"))
    bo.connect(inner.get_output_port("x"), gain.get_input_port())
    bo.export_output(gain.get_output_port(), "scaled")
    outer = bo.build("outer")
    assert p.get_path() == "::outer::inner::pendulum"
    ctx = outer.create_default_context().with_continuous_state(jnp.array([0.5, 1.0]))
    expected = [1.0, 2.0 - 0.1 * 1.0 - 9.81 * np.sin(0.5)]
    np.testing.assert_allclose(outer.calc_time_derivatives(ctx).x, expected, rtol=1e-14)
    np.testing.assert_allclose(outer.get_output_port("scaled").eval(ctx), [1.5, 3.0])
    # the inner diagram alone, with its exported input fixed
    assert inner.get_direct_feedthroughs() == frozenset()
    ic = d_ic = outer.get_subsystem_context(ctx, inner)
    np.testing.assert_allclose(inner.get_input_port(0).eval(d_ic), [2.0])
    np.testing.assert_allclose(inner.calc_time_derivatives(ic).x, expected, rtol=1e-14)
    # the gain's feedthrough composes through the outer diagram: none from inputs (there are none)
    assert outer.num_input_ports() == 0


def test_diagram_feedthrough_composition_and_fanout():
    b = js.DiagramBuilder()
    g1 = b.add_named_system("g1", js.Gain(2.0, 1))
    g2 = b.add_named_system("g2", js.Gain(5.0, 1))
    lag = b.add_named_system("lag", js.FirstOrderLowPassFilter(1.0, 1))
    b.export_input(g1.get_input_port(), "u")
    b.connect_input("u", lag.get_input_port())  # one diagram input feeds two ports
    b.connect(g1.get_output_port(), g2.get_input_port())
    b.export_output(g2.get_output_port(), "y_fast")
    b.export_output(lag.get_output_port(), "y_slow")
    d = b.build("fan")
    assert d.get_direct_feedthroughs() == frozenset({(0, 0)})
    ctx = d.get_input_port(0).fix_value(d.create_default_context(), [1.5])
    np.testing.assert_allclose(d.get_output_port("y_fast").eval(ctx), [15.0])
    np.testing.assert_allclose(d.calc_time_derivatives(ctx).x, [1.5])
    assert [p.get_name() for p in d.get_input_port_locators(d.get_input_port(0))] == ["u0", "u0"]
    with pytest.raises(
        js.InputPortNotConnectedError,
        match=r"InputPort\[0\] \(u\) of System ::fan \(Diagram\) is neither connected nor fixed",
    ):
        d.get_output_port("y_fast").eval(d.create_default_context())


def test_continuous_state_layout_is_drakes_q_v_z():
    b = js.DiagramBuilder()
    p1 = b.add_named_system("p1", Pendulum())
    lag = b.add_named_system("lag", js.FirstOrderLowPassFilter(1.0, 1))
    p2 = b.add_named_system("p2", Pendulum())
    for p in (p1, p2):
        b.export_input(p.get_input_port(), f"{p.get_name()}_tau")
    b.export_input(lag.get_input_port(), "lag_u")
    d = b.build()
    ctx = d.create_default_context()
    ctx = d.set_subsystem_context(
        ctx, p1, d.get_subsystem_context(ctx, p1).with_continuous_state(jnp.array([1.0, 2.0]))
    )
    ctx = d.set_subsystem_context(
        ctx, p2, d.get_subsystem_context(ctx, p2).with_continuous_state(jnp.array([3.0, 4.0]))
    )
    ctx = d.set_subsystem_context(ctx, lag, d.get_subsystem_context(ctx, lag).with_continuous_state(jnp.array([5.0])))
    cs = ctx.get_continuous_state()
    np.testing.assert_array_equal(cs.x, [1.0, 3.0, 2.0, 4.0, 5.0])  # [q1 q2 v1 v2 z]
    assert (cs.num_q, cs.num_v, cs.num_z) == (2, 2, 1)
    # round trip through with_continuous_state
    ctx2 = ctx.with_continuous_state(jnp.arange(5.0))
    np.testing.assert_array_equal(d.get_subsystem_context(ctx2, p2).get_continuous_state_vector(), [1.0, 3.0])
    np.testing.assert_array_equal(d.get_subsystem_context(ctx2, lag).get_continuous_state_vector(), [4.0])
    for i, name in enumerate(["p1_tau", "p2_tau", "lag_u"]):
        ctx2 = d.get_input_port(name).fix_value(ctx2, [float(i)])
    xdot = d.calc_time_derivatives(ctx2).x
    np.testing.assert_allclose(xdot[:2], [2.0, 3.0])  # qdot = v
    np.testing.assert_allclose(xdot[4], 2.0 - 4.0)  # lag: u - x
    # map_velocity_to_qdot over the diagram
    np.testing.assert_array_equal(d.map_velocity_to_qdot(ctx2, jnp.array([7.0, 8.0])), [7.0, 8.0])
    # potential energy sums over subsystems
    pe = d.calc_potential_energy(ctx2)
    np.testing.assert_allclose(pe, -9.81 * (np.cos(0.0) + np.cos(1.0)))


def test_builder_errors():
    b = js.DiagramBuilder()
    p = b.add_system(Pendulum())
    with pytest.raises(
        js.DiagramBuildError, match=r"a subsystem named 'pendulum' \(Pendulum\) is already in this builder"
    ):
        b.add_system(Pendulum())
    with pytest.raises(js.DiagramBuildError, match="has already been added to this DiagramBuilder"):
        b.add_system(p)
    src = js.ConstantVectorSource([1.0, 2.0], name="src")
    with pytest.raises(
        js.DiagramBuildError,
        match=r"OutputPort\[0\] \(y0\) of System ::src .*not added to this DiagramBuilder; add_system\(\) it "
        r"first\. Systems added so far: pendulum \(Pendulum\)\.",
    ):
        b.connect(src.get_output_port(), p.get_input_port())
    b.add_system(src)
    with pytest.raises(
        js.DiagramBuildError,
        match=r"mismatched vector sizes while connecting OutputPort\[0\] \(y0\) of System ::src "
        r"\(ConstantVectorSource\) \(size 2\) to InputPort\[0\] \(tau\) of System ::pendulum \(Pendulum\) \(size 1\)",
    ):
        b.connect(src.get_output_port(), p.get_input_port())
    one = b.add_system(js.ConstantVectorSource([1.0], name="one"))
    b.connect(one.get_output_port(), p.get_input_port())
    with pytest.raises(
        js.DiagramBuildError,
        match=r"InputPort\[0\] \(tau\) of System ::pendulum .* is already connected to "
        r"OutputPort\[0\] \(y0\) of System ::one",
    ):
        b.connect(one.get_output_port(), p.get_input_port())
    with pytest.raises(js.DiagramBuildError, match="is already connected"):
        b.export_input(p.get_input_port())

    class Abs(js.LeafSystem):
        def __init__(self):
            super().__init__("abs")
            self.declare_abstract_input_port("a", {"k": jnp.zeros(2)})

    a = b.add_system(Abs())
    with pytest.raises(js.DiagramBuildError, match="one is vector-valued and the other abstract"):
        b.connect(src.get_output_port(), a.get_input_port())
    b.export_output(p.get_output_port(), "x")
    with pytest.raises(js.DiagramBuildError, match="already has an output port named 'x'"):
        b.export_output(p.get_output_port(), "x")
    d = b.build("d")
    with pytest.raises(js.DiagramBuildError, match="build\\(\\) has already been called"):
        b.add_system(Pendulum(name="late"))
    # a system can belong to one diagram only
    b2 = js.DiagramBuilder()
    with pytest.raises(
        js.DiagramBuildError, match=r"System ::d::pendulum \(Pendulum\) has already been added to another"
    ):
        b2.add_system(p)
    with pytest.raises(js.JaxsysError, match="its name can no longer change"):
        p.set_name("renamed")
    assert d.num_subsystems() == 4


def test_unnamed_systems_get_unique_names():
    b = js.DiagramBuilder()
    a1 = b.add_system(js.Adder(2, 1))
    a2 = b.add_system(js.Adder(2, 1))
    assert (a1.get_name(), a2.get_name()) == ("Adder", "Adder_1")


def test_algebraic_loop_is_reported_with_the_cycle():
    b = js.DiagramBuilder()
    adder = b.add_named_system("adder", js.Adder(2, 1))
    gain = b.add_named_system("gain", js.Gain(0.5, 1))
    b.connect(adder.get_output_port(), gain.get_input_port())
    b.connect(gain.get_output_port(), adder.get_input_port(0))
    b.export_input(adder.get_input_port(1), "r")
    with pytest.raises(js.AlgebraicLoopError) as err:
        b.build("loop")
    msg = str(err.value)
    assert "Algebraic loop detected in DiagramBuilder" in msg
    assert "InputPort[0] (u0) of System ::loop::adder (Adder) is direct-feedthrough to" in msg
    assert "OutputPort[0] (sum) of System ::loop::adder (Adder) is connected to" in msg
    assert "InputPort[0] (u0) of System ::loop::gain (Gain) is direct-feedthrough to" in msg
    assert "OutputPort[0] (y0) of System ::loop::gain (Gain) is connected to" in msg
    # a failed build leaves the systems free to be used again
    assert adder.get_parent() is None


def test_feedback_through_state_is_not_a_loop_but_declared_feedthrough_is():
    # Drake would assume feedthrough for an undeclared Python output; jaxsys traces it.
    class StateOut(js.LeafSystem):
        def __init__(self, name, declare):
            super().__init__(name)
            self.declare_continuous_state(1)
            self.declare_vector_input_port("u", 1)
            kw = {"direct_feedthrough": True} if declare else {}
            self.declare_vector_output_port("y", 1, lambda c: c.get_continuous_state_vector(), **kw)

        def do_calc_time_derivatives(self, context):
            return self.get_input_port(0).eval(context) - context.get_continuous_state_vector()

    for declare in (False, True):
        b = js.DiagramBuilder()
        s = b.add_system(StateOut("s", declare))
        g = b.add_system(js.Gain(-1.0, 1, name="g"))
        b.connect(s.get_output_port(), g.get_input_port())
        b.connect(g.get_output_port(), s.get_input_port())
        if declare:
            with pytest.raises(js.AlgebraicLoopError):
                b.build()
        else:
            d = b.build()
            ctx = d.create_default_context().with_continuous_state(jnp.array([2.0]))
            np.testing.assert_allclose(d.calc_time_derivatives(ctx).x, [-4.0])


def test_declared_no_feedthrough_but_reads_input_is_reported():
    class Liar(js.LeafSystem):
        def __init__(self):
            super().__init__("liar")
            self.declare_vector_input_port("u", 1)
            self.declare_vector_output_port("y", 1, lambda c: self.get_input_port(0).eval(c), direct_feedthrough=False)

    b = js.DiagramBuilder()
    src = b.add_system(js.ConstantVectorSource([1.0], name="src"))
    liar = b.add_system(Liar())
    b.connect(src.get_output_port(), liar.get_input_port())
    b.export_output(liar.get_output_port(), "y")
    d = b.build()
    with pytest.raises(
        js.PortError, match=r"OutputPort\[0\] \(y\) of System ::_::liar .*declared without direct feedthrough"
    ):
        d.get_output_port(0).eval(d.create_default_context())


def test_graphviz_string_renders_with_dot(tmp_path):
    d, _, _ = closed_loop()
    dot = d.get_graphviz_string()
    assert dot.startswith("digraph") and "pendulum" in dot and "->" in dot
    # one edge per connection plus exported outputs
    assert dot.count("->") == 4
    leaf_dot = Pendulum(name="weird name|<x>").get_graphviz_string()
    if shutil.which("dot") is None:
        pytest.skip("graphviz 'dot' is not installed")
    for text in (dot, leaf_dot):
        out = subprocess.run(["dot", "-Tsvg"], input=text.encode(), capture_output=True, check=False)
        assert out.returncode == 0, out.stderr.decode()
        assert b"<svg" in out.stdout


def test_connecting_abstract_ports_of_different_value_types_is_an_error():
    class IntSource(js.LeafSystem):
        def __init__(self):
            super().__init__("ints")
            self.declare_abstract_output_port("y", jnp.zeros(3, jnp.int32), lambda c: jnp.zeros(3, jnp.int32))

    class FloatSink(js.LeafSystem):
        def __init__(self, model):
            super().__init__("sink")
            self.declare_abstract_input_port("u", model)

    b = js.DiagramBuilder()
    src = b.add_system(IntSource())
    sink = b.add_system(FloatSink(jnp.zeros(3, jnp.float32)))
    with pytest.raises(
        js.DiagramBuildError,
        match=r"mismatched value types while connecting OutputPort\[0\] \(y\) of System ::ints .*\['int'\].*"
        r"InputPort\[0\] \(u\) of System ::sink .*\['float'\]",
    ):
        b.connect(src.get_output_port(0), sink.get_input_port(0))
    # same kind, another width (int32 values, an int64 model; float32 vs float64 alike): accepted
    b2 = js.DiagramBuilder()
    s2 = b2.add_system(IntSource())
    k2 = b2.add_system(FloatSink(np.zeros(3, np.int64)))
    b2.connect(s2.get_output_port(0), k2.get_input_port(0))
    assert b2.build().num_subsystems() == 2


def test_my_context_from_root_in_nested_diagrams():
    inner_b = js.DiagramBuilder()
    p = inner_b.add_named_system("pend", Pendulum())
    src = inner_b.add_named_system("tau", js.ConstantVectorSource([0.25]))
    inner_b.connect(src.get_output_port(), p.get_input_port())
    inner = inner_b.build("inner")
    outer_b = js.DiagramBuilder()
    outer_b.add_system(inner)
    lag = outer_b.add_named_system("lag", js.FirstOrderLowPassFilter(2.0, 1))
    outer_b.export_input(lag.get_input_port(), "u")
    root = outer_b.build("root")
    ctx = root.get_input_port("u").fix_value(root.create_default_context(), [1.0])

    mine = p.get_my_context_from_root(ctx)
    assert mine.system_id == p.get_system_id()
    np.testing.assert_allclose(p.get_input_port().eval(mine), [0.25])  # the connected input's value
    # one call to set the pendulum's state two levels down; nothing else changes
    ctx2 = p.update_my_context_in_root(ctx, lambda c: c.with_continuous_state(jnp.array([0.5, -1.0])))
    np.testing.assert_allclose(p.get_my_context_from_root(ctx2).get_continuous_state_vector(), [0.5, -1.0])
    np.testing.assert_allclose(
        lag.get_my_context_from_root(ctx2).get_continuous_state_vector(),
        lag.get_my_context_from_root(ctx).get_continuous_state_vector(),
    )
    # the root's own derivative sees the new pendulum state: thetadot = w = -1
    xdot = root.calc_time_derivatives(ctx2).x
    np.testing.assert_allclose(root.get_subsystem_context(ctx2, p).get_continuous_state_vector(), [0.5, -1.0])
    own = p.calc_time_derivatives(p.get_my_context_from_root(ctx2)).x  # [thetadot, wdot]
    np.testing.assert_allclose(own[0], -1.0)
    np.testing.assert_allclose(xdot[:2], own, rtol=1e-15)  # Drake's order: q of all, v of all, then z
    # the root system itself: its own context
    assert root.get_my_context_from_root(ctx) is ctx
    # a context of another system is refused with both systems named
    with pytest.raises(js.JaxsysError, match="pend|root"):
        p.get_my_context_from_root(p.create_default_context())
