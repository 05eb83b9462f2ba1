"""System compatibility (Drake's seed page): ids on contexts and other objects."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from models import PD

import jaxsys as js
from jaxsys.examples import Pendulum


def two_plant_diagram():
    b = js.DiagramBuilder()
    cart = b.add_named_system("cart", Pendulum())
    pend = b.add_named_system("pendulum", Pendulum())
    b.export_input(cart.get_input_port(), "u1")
    b.export_input(pend.get_input_port(), "u2")
    return b.build("d"), cart, pend


def test_context_of_another_system_is_refused_naming_both():
    d, cart, pend = two_plant_diagram()
    ctx = d.create_default_context()
    cart_ctx = d.get_subsystem_context(ctx, cart)
    with pytest.raises(
        js.SystemMismatchError,
        match=r"Context was created for System ::d::cart \(Pendulum\), not for System ::d::pendulum \(Pendulum\)",
    ):
        pend.calc_time_derivatives(cart_ctx)
    # the diagram's context given to a subsystem
    with pytest.raises(js.SystemMismatchError, match=r"created for System ::d \(Diagram\), not for System ::d::cart"):
        cart.get_output_port(0).eval(ctx)
    # every public entry point checks
    for call in (
        lambda: pend.calc_output(cart_ctx),
        lambda: pend.calc_potential_energy(cart_ctx),
        lambda: pend.get_input_port(0).fix_value(cart_ctx, [1.0]),
        lambda: pend.get_input_port(0).eval(cart_ctx),
        lambda: pend.map_velocity_to_qdot(cart_ctx, jnp.zeros(1)),
        lambda: pend.set_default_context(cart_ctx),
        lambda: d.get_subsystem_context(cart_ctx, cart),
        lambda: pend.copy_continuous_state_vector(cart_ctx),
        lambda: pend.check_system_constraints_satisfied(cart_ctx),
    ):
        with pytest.raises(js.SystemMismatchError):
            call()


def test_other_objects_carry_ids():
    p = Pendulum()
    q = Pendulum(name="q")
    ctx = p.create_default_context()
    sid = p.get_system_id()
    assert ctx.get_system_id() == sid
    state = ctx.get_state()
    assert state.system_id == sid and state.continuous_state.system_id == sid
    assert state.discrete_state.system_id == sid and ctx.get_parameters().system_id == sid
    assert p.allocate_output().system_id == sid
    assert p.allocate_time_derivatives().system_id == sid
    assert p.allocate_discrete_variables().system_id == sid
    with pytest.raises(
        js.SystemMismatchError, match=r"SystemOutput was created for System ::pendulum .* not for System ::q"
    ):
        q.check_valid_output(p.allocate_output())


def test_clone_keeps_ids_and_dtype_conversion_clears_them():
    p = Pendulum()
    ctx = p.get_input_port(0).fix_value(p.create_default_context(), [0.5])
    clone = ctx.clone()
    assert clone.get_system_id() == ctx.get_system_id()
    np.testing.assert_array_equal(p.calc_time_derivatives(clone).x, p.calc_time_derivatives(ctx).x)
    f32 = ctx.astype(jnp.float32)
    assert f32.get_continuous_state_vector().dtype == jnp.float32
    assert f32.get_system_id() == 0
    assert f32.get_state().continuous_state.system_id == 0
    assert f32.parameters.system_id == 0
    with pytest.raises(js.SystemMismatchError, match=r"carries no system id .*converted to another dtype"):
        p.calc_time_derivatives(f32)
    # the documented route: allocate with the system, then set_from (ids stay the destination's)
    dst = p.create_default_context(jnp.float32)
    dst = dst.set_from(ctx)  # time, state, parameters (not inputs, as in Drake)
    dst = p.fix_input_ports_from(p, ctx, dst)
    assert dst.get_system_id() == p.get_system_id()
    assert dst.get_continuous_state_vector().dtype == jnp.float32
    np.testing.assert_allclose(p.calc_time_derivatives(dst).x, p.calc_time_derivatives(ctx).x, rtol=1e-6)
    # diagrams too: conversion clears every subcontext's id
    d, cart, _ = two_plant_diagram()
    dctx = d.create_default_context().astype(jnp.float32)
    assert all(c.get_system_id() == 0 for c in dctx._leaf_contexts())


def test_ids_survive_jit_and_vmap():
    p = Pendulum()
    ctx = p.get_input_port(0).fix_value(p.create_default_context(), [0.0])
    out = jax.jit(lambda c: c.with_time(c.get_time() + 1.0))(ctx)
    assert out.get_system_id() == p.get_system_id()
    p.validate_context(out)


def test_non_context_argument():
    p = Pendulum()
    with pytest.raises(js.JaxsysError, match=r"System ::pendulum \(Pendulum\) expected a Context, got ndarray"):
        p.calc_time_derivatives(np.zeros(2))


def test_pd_model_is_valid():  # keeps models.PD exercised standalone
    pd = PD()
    ctx = pd.get_input_port(0).fix_value(pd.create_default_context(), [1.0, 2.0])
    np.testing.assert_allclose(pd.get_output_port(0).eval(ctx), [-7.0])


def test_same_path_systems_are_told_apart_by_id():
    a, b = Pendulum(), Pendulum()
    with pytest.raises(
        js.SystemMismatchError,
        match=rf"created for System ::pendulum \(Pendulum, id {a.get_system_id()}\), not for System "
        rf"::pendulum \(Pendulum, id {b.get_system_id()}\)",
    ):
        b.calc_time_derivatives(a.create_default_context())
