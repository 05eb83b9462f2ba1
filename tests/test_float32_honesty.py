"""Issue #36 items 1-2: what float32 cannot do is said, not silently returned as ok.

- An error-controlled run that asks for an accuracy finer than its dtype resolves (float32: below
  ~9.5e-7) warns at call time (PrecisionWarning, naming float32 and jax_enable_x64); at 1e-6 in float32
  and at 1e-10 in float64 it does not, and meets the closed form.
- A failed run's message gives the working minimum step in its dtype's own figures and, in float32, says
  float32 may be the cause and how to enable float64.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsys as js
from jaxsys.analysis.simulate import PrecisionWarning
from jaxsys.examples import SpringMassDamper


def _closed_form(t, q0=1.0, m=1.0, k=10.0, c=0.1):
    wn, zeta = np.sqrt(k / m), c / (2 * np.sqrt(k * m))
    wd = wn * np.sqrt(1 - zeta**2)
    return q0 * np.exp(-zeta * wn * t) * (np.cos(wd * t) + zeta * wn / wd * np.sin(wd * t))


@pytest.mark.parametrize("x64,accuracy,warns", [(False, 1e-10, True), (False, 1e-6, False), (True, 1e-10, False)])
def test_an_accuracy_the_dtype_cannot_deliver_warns_at_call_time(x64, accuracy, warns):
    with jax.enable_x64(x64):
        plant = SpringMassDamper(has_input=False)
        ctx = plant.create_default_context().with_continuous_state(jnp.array([1.0, 0.0]))
        integrator = js.RungeKutta5Integrator(target_accuracy=accuracy)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = js.simulate(plant, ctx, 2.0, integrator)
        ours = [w for w in caught if issubclass(w.category, PrecisionWarning)]
        assert bool(ours) == warns, [str(w.message) for w in caught]
        if warns:
            text = str(ours[0].message)
            assert "float32" in text and "jax_enable_x64" in text and "1e-10" in text
        else:
            err = abs(float(r.context.get_continuous_state_vector()[0]) - _closed_form(2.0))
            assert err < (2e-5 if not x64 else 1e-8), err


@pytest.mark.parametrize("x64", [True, False])
def test_a_failed_runs_message_speaks_of_its_dtype(x64):
    """A stiff decay with a requested minimum step that error control must go below: MIN_STEP."""

    class Stiff(js.LeafSystem):
        def __init__(self):
            super().__init__("stiff")
            self.declare_continuous_state(1, default=[1.0])

        def do_calc_time_derivatives(self, context):
            return -1e4 * context.get_continuous_state_vector()

    with jax.enable_x64(x64):
        s = Stiff()
        integ = js.RungeKutta3Integrator(target_accuracy=1e-4, requested_minimum_step_size=0.01)
        r = js.simulate(s, s.create_default_context(), 1.0, integ, throw=False)
        assert int(r.status) == js.Status.MIN_STEP.code
        text = r.message()
        if x64:
            assert "1e-14 max(1, |t|) in float64" in text and "jax_enable_x64" not in text
        else:
            assert "4.8e-07 max(1, |t|) in float32" in text and "jax_enable_x64" in text
            with pytest.raises(Exception, match="jax_enable_x64"):
                js.simulate(s, s.create_default_context(), 1.0, integ)
