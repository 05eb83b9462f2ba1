"""Matrix products inside a run are traced at full precision.

On GPUs, JAX lets float32 matrix products default to TensorFloat-32 (~1e-3 relative): measured on an
H200, Radau5 on a float32 batch of 1,024 Van der Pol oscillators then reached no error below 7.2e-5
at any accuracy from 3e-4 to 1e-5 (9.3e-6 at 3e-4 with full precision, as on a CPU;
benchmarks/RESULTS.md, stop 57). A CPU computes the same either way, so this checks the program: every
``dot_general`` of a run (the integrator's stage combinations and the model's own A x) asks for
HIGHEST precision, and the values equal the closed form.
"""

import dataclasses
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

import jaxsys as js


def _dots(jaxpr):
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            yield eqn
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            yield from _dots(sub)


@pytest.mark.parametrize("integrator", [js.RungeKutta5Integrator, js.Radau5Integrator])
def test_every_matrix_product_of_a_run_is_full_precision(integrator):
    A = np.array([[0.0, 1.0], [-4.0, -0.4]])
    system = js.LinearSystem(A, np.zeros((2, 1)), np.eye(2), np.zeros((2, 1)))
    ctx = system.create_default_context().with_continuous_state(jnp.array([1.0, 0.0]))
    ctx = system.get_input_port(0).fix_value(ctx, jnp.zeros(1))
    integ = integrator(target_accuracy=1e-9, max_step_size=0.1)

    def run(c):
        return js.simulate(system, c, 2.0, integ).context.get_continuous_state_vector()

    dots = list(_dots(jax.make_jaxpr(run)(ctx).jaxpr))
    assert dots, "the run holds matrix products (the model's A x, the stages' combinations)"
    highest = jax.lax.Precision.HIGHEST
    assert all(d.params["precision"] == (highest, highest) for d in dots), [d.params["precision"] for d in dots]
    np.testing.assert_allclose(run(ctx), scipy.linalg.expm(2.0 * A) @ np.array([1.0, 0.0]), atol=1e-7)


def test_discrete_dynamics_products_are_full_precision():
    """iLQR's rollouts (``discrete_dynamics``) step the plant as ``simulate`` does, at full precision."""
    A = np.array([[0.0, 1.0], [-4.0, -0.4]])
    system = js.LinearSystem(A, np.array([[0.0], [1.0]]), np.eye(2), np.zeros((2, 1)))
    F = js.discrete_dynamics(system, system.create_default_context(), 0.05)
    x, u = jnp.array([1.0, 0.0]), jnp.array([0.3])
    dots = list(_dots(jax.make_jaxpr(F)(x, u).jaxpr))
    highest = jax.lax.Precision.HIGHEST
    assert dots and all(d.params["precision"] == (highest, highest) for d in dots)
    # RK4 of a linear system: the degree-4 Taylor polynomial of expm(h A) applied to x (u's term too)
    h = 0.05
    M = np.block([[A, np.array([[0.0], [1.0]])], [np.zeros((1, 3))]])
    taylor = sum(np.linalg.matrix_power(h * M, k) / math.factorial(k) for k in range(5))
    np.testing.assert_allclose(F(x, u), (taylor @ np.array([1.0, 0.0, 0.3]))[:2], rtol=0, atol=1e-14)


def test_derivative_programs_are_full_precision(reverse_by):
    """The programs of ``jax.grad`` (by the loop's Jacobian and by the discrete adjoint's sweep, which
    is lowered when the program is) and of ``jax.jacfwd`` through a run: every matrix product HIGHEST
    (the loop-Jacobian's product with the input tangents was DEFAULT); the gradient against expm."""
    A = np.array([[0.0, 1.0], [-4.0, -0.4]])
    system = js.LinearSystem(A, np.zeros((2, 1)), np.eye(2), np.zeros((2, 1)))
    ctx = system.get_input_port(0).fix_value(system.create_default_context(), jnp.zeros(1))
    integ = js.Radau5Integrator(target_accuracy=1e-10, max_step_size=0.1)

    def loss(x0):
        x = js.simulate(system, ctx.with_continuous_state(x0), 2.0, integ).context.get_continuous_state_vector()
        return jnp.sum(x**2)

    x0 = jnp.array([1.0, 0.0])
    for transform in (jax.grad, jax.jacfwd):
        text = jax.jit(transform(loss)).lower(x0).as_text()
        dots = re.findall(r"stablehlo\.dot_general[^\n]*", text)
        assert dots and all("HIGHEST" in d for d in dots), [d for d in dots if "HIGHEST" not in d][:3]
    E = scipy.linalg.expm(2.0 * A)
    np.testing.assert_allclose(jax.grad(loss)(x0), 2.0 * E.T @ E @ np.asarray(x0), rtol=1e-7)


def test_float32_batches_and_pending_updates_are_full_precision():
    """float32 (JAX's default dtype, where TensorFloat-32 bit): ``batch_simulate`` under ``jit`` and
    ``jax.grad`` of a float32 run, and ``advance_pending_events`` (an update whose handler multiplies by
    a matrix): every product HIGHEST; the float32 batch against expm to float32's resolution."""
    A = np.array([[0.0, 1.0], [-4.0, -0.4]], np.float32)
    with jax.enable_x64(False):
        system = js.LinearSystem(A, np.zeros((2, 1), np.float32), np.eye(2, dtype=np.float32), np.zeros((2, 1)))
        ctx = system.get_input_port(0).fix_value(system.create_default_context(), jnp.zeros(1))
        integ = js.RungeKutta5Integrator(target_accuracy=1e-5, max_step_size=0.1)
        x0s = jnp.array([[1.0, 0.0], [0.5, 0.2], [0.0, 1.0]], jnp.float32)
        contexts = jax.vmap(ctx.with_continuous_state)(x0s)

        def batch(cs):
            return js.batch_simulate(system, cs, 2.0, integ).result.context.get_continuous_state_vector()

        def loss(x0):
            x = js.simulate(system, ctx.with_continuous_state(x0), 2.0, integ).context.get_continuous_state_vector()
            return jnp.sum(x**2)

        highest = jax.lax.Precision.HIGHEST
        for fn, arg in ((batch, contexts), (jax.grad(loss), x0s[0])):
            dots = list(_dots(jax.make_jaxpr(fn)(arg).jaxpr))
            assert dots and all(d.params["precision"] == (highest, highest) for d in dots)
        out = jax.jit(batch)(contexts)
        assert out.dtype == jnp.float32
        np.testing.assert_allclose(out, np.asarray(x0s) @ scipy.linalg.expm(2.0 * A.astype(np.float64)).T, atol=1e-4)

        class Kick(js.LeafSystem):
            def __init__(self):
                super().__init__("kick")
                self.declare_continuous_state(2)
                self.declare_per_step_unrestricted_update_event(self.kick)

            def kick(self, c, state):
                x = state.continuous_state.get_vector()
                new = dataclasses.replace(state.continuous_state, x=jnp.asarray(A) @ x)
                return dataclasses.replace(state, continuous_state=new)

        kick = Kick()
        kctx = kick.create_default_context().with_continuous_state(jnp.array([1.0, 2.0], jnp.float32))
        dots = list(_dots(jax.make_jaxpr(lambda c: js.advance_pending_events(kick, c))(kctx).jaxpr))
        assert dots and all(d.params["precision"] == (highest, highest) for d in dots)
        np.testing.assert_allclose(js.advance_pending_events(kick, kctx).get_continuous_state_vector(), A @ [1.0, 2.0])
