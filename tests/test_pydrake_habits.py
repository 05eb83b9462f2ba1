"""Issue #36 items 6-8: answers that looked fine and were not, and pydrake habits that failed silently
or with a bare AttributeError (or a raw message from deep inside). Each case fails on the code before
the fix."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsys as js
from jaxsys.examples import Pendulum


def _pendulum():
    p = Pendulum()
    return p, p.get_input_port(0).fix_value(p.create_default_context(), [0.0])


@pytest.mark.parametrize("kind", ["unrestricted", "discrete"])
def test_an_update_handler_that_returns_none_is_a_named_error(kind):
    """A forgotten `return` in an update handler used to keep the old state silently."""

    class Forgetful(js.LeafSystem):
        def __init__(self):
            super().__init__("forgetful")
            self.declare_discrete_state(1)
            if kind == "unrestricted":
                self.declare_periodic_unrestricted_update_event(0.1, 0.0, self.update)
            else:
                self.declare_periodic_discrete_update_event(0.1, 0.0, self.update)

        def update(self, context, state):
            state.with_discrete_state(0, jnp.ones(1)) if kind == "unrestricted" else jnp.ones(1)  # no return

    s = Forgetful()
    with pytest.raises(js.JaxsysError, match=r"forgetful.*returned None.*EventStatus"):
        js.simulate(s, s.create_default_context(), 0.3)


def test_drake_camelcase_names_name_the_jaxsys_method():
    p, ctx = _pendulum()
    cases = [
        (ctx, "SetContinuousState", "with_continuous_state"),
        (ctx, "SetTime", "with_time"),
        (ctx, "get_mutable_continuous_state", "with_continuous_state"),
        (p, "CreateDefaultContext", "create_default_context"),
        (p, "GetInputPort", "get_input_port"),
        (p.get_input_port(0), "FixValue", "fix_value"),
        (js.DiagramBuilder(), "AddSystem", "add_system"),
        (js.Simulator(p, ctx), "AdvanceTo", "advance_to"),
    ]
    for obj, drake, ours in cases:
        with pytest.raises(AttributeError, match=ours):
            getattr(obj, drake)
    with pytest.raises(AttributeError, match="no attribute 'nonsense'$"):
        ctx.nonsense  # noqa: B018 - ordinary names keep the ordinary message


@pytest.mark.parametrize("x64", [True, False])
def test_the_simulators_mutable_context_changes_the_simulator(x64):
    """`sim.get_mutable_context().with_continuous_state(x)` (or Drake's SetContinuousState) used to
    change a copy and leave the simulator running from the old state."""
    with jax.enable_x64(x64):
        p, ctx = _pendulum()
        sim = js.Simulator(p, ctx)
        sim.get_mutable_context().with_continuous_state(jnp.array([1.0, 0.0]))
        np.testing.assert_array_equal(sim.get_context().get_continuous_state_vector(), [1.0, 0.0])
        sim.get_mutable_context().SetContinuousState(jnp.array([0.5, 0.0]))
        assert float(sim.get_mutable_context().get_continuous_state_vector()[0]) == 0.5
        sim.advance_to(1.0)
        ref = js.simulate(p, ctx.with_continuous_state(jnp.array([0.5, 0.0])), 1.0)
        np.testing.assert_allclose(
            sim.get_context().get_continuous_state_vector(),
            ref.context.get_continuous_state_vector(),
            rtol=0,
            atol=1e-12 if x64 else 1e-6,
        )
        assert isinstance(sim.get_mutable_context().get(), js.Context)


def test_an_integrator_class_instead_of_an_instance_is_explained():
    p, ctx = _pendulum()
    with pytest.raises(js.JaxsysError, match=r"pass an instance, e.g. RungeKutta3Integrator\(\)"):
        js.simulate(p, ctx, 1.0, js.RungeKutta3Integrator)


def test_a_record_function_returning_a_string_is_explained():
    p, ctx = _pendulum()
    with pytest.raises(js.JaxsysError, match="record function returned a str"):
        js.simulate(p, ctx, 1.0, save_at=[0.5], record=lambda c: "hello")


def test_a_negative_u_limit_is_explained():
    p, ctx = _pendulum()
    with pytest.raises(js.JaxsysError, match="u_limit must be >= 0"):
        js.direct_shooting(p, ctx, 1.0, 5, lambda x, u: u @ u, u_limit=-1.0)


def test_python_control_flow_in_a_function_systems_function_is_explained():
    """The LeafSystem methods were explained already; a FunctionSystem's plain function gave JAX's raw
    message."""

    def dynamics(t, x, u, p):
        if x[0] > 0:  # Python `if` on a traced value
            return -x
        return x

    f = js.FunctionSystem(dynamics, None, num_states=1, x0=[1.0])
    with pytest.raises(js.JaxsysError, match=r"function dynamics .*jnp.where"):
        js.simulate(f, f.create_default_context(), 1.0)
