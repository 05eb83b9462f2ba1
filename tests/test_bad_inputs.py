"""Every bad input gets a named error or a status, never a silent result (issue #16).

Each case asserts the error type and that the message names the function or system and what was
expected and given, or asserts the status; under a plain call, ``jax.jit`` and ``jax.vmap`` where
those apply, in float32 and float64 for the numeric ones. (Build-time diagram errors are covered in
test_diagram.py and test_compatibility.py.)
"""

from __future__ import annotations

import warnings
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsys as js
from jaxsys.framework.errors import JaxsysError, PortError, StateError


DTYPES = [jnp.float32, jnp.float64]
RK3 = js.RungeKutta3Integrator(max_step_size=0.1, target_accuracy=1e-4, max_steps=2000)
RK4 = js.RungeKutta4Integrator(max_step_size=0.1)


class Decay(js.LeafSystem):
    """x' = -x."""

    def __init__(self) -> None:
        super().__init__("decay")
        self.declare_continuous_state(1, default=[1.0])

    def do_calc_time_derivatives(self, context: Any) -> Any:
        return -context.get_continuous_state_vector()


class SqrtDynamics(js.LeafSystem):
    """x' = sqrt(x - 2): NaN from the start (x = 1)."""

    def __init__(self) -> None:
        super().__init__("sqrt_dynamics")
        self.declare_continuous_state(1, default=[1.0])

    def do_calc_time_derivatives(self, context: Any) -> Any:
        return jnp.sqrt(context.get_continuous_state_vector() - 2.0)


class Riccati(js.LeafSystem):
    """x' = x^2, x(0) = 1: blows up at t = 1."""

    def __init__(self) -> None:
        super().__init__("riccati")
        self.declare_continuous_state(1, default=[1.0])

    def do_calc_time_derivatives(self, context: Any) -> Any:
        x = context.get_continuous_state_vector()
        return x * x


class ComplexDynamics(js.LeafSystem):
    def __init__(self) -> None:
        super().__init__("complex_dynamics")
        self.declare_continuous_state(1, default=[1.0])

    def do_calc_time_derivatives(self, context: Any) -> Any:
        return 1j * context.get_continuous_state_vector()


class PythonIf(js.LeafSystem):
    def __init__(self) -> None:
        super().__init__("python_if")
        self.declare_continuous_state(1, default=[1.0])

    def do_calc_time_derivatives(self, context: Any) -> Any:
        x = context.get_continuous_state_vector()
        if x[0] > 0:  # a Python branch on a traced value
            return -x
        return x


class PythonFloat(js.LeafSystem):
    def __init__(self) -> None:
        super().__init__("python_float")
        self.declare_continuous_state(1, default=[1.0])

    def do_calc_time_derivatives(self, context: Any) -> Any:
        return jnp.array([-float(context.get_continuous_state_vector()[0])])


class OutputIf(js.LeafSystem):
    """A Python branch in an output's calc, recorded by the run."""

    def __init__(self) -> None:
        super().__init__("output_if")
        self.declare_continuous_state(1, default=[1.0])
        self.declare_vector_output_port("y", 1, self.calc_y)

    def calc_y(self, context: Any) -> Any:
        x = context.get_continuous_state_vector()
        return x if x[0] > 0 else -x

    def do_calc_time_derivatives(self, context: Any) -> Any:
        return -context.get_continuous_state_vector()


DECAY = Decay()


def ctx(dtype=jnp.float64, t=0.0, x=1.0):
    return DECAY.create_default_context(dtype).with_time(t).with_continuous_state(jnp.array([x], dtype))


def status_of(r) -> js.Status:
    return js.Status.from_code(r.status)


# ===== times ===================================================================================
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("t_final", [float("nan"), float("inf"), -float("inf")])
def test_t_final_not_finite_is_an_error(t_final, dtype):
    with pytest.raises(JaxsysError, match=r"simulate: t_final must be a finite time in seconds; got (nan|inf|-inf)"):
        js.simulate(DECAY, ctx(dtype), t_final, RK3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_context_time_nan_is_an_error(dtype):
    with pytest.raises(JaxsysError, match=r"simulate: the context's time is nan \(System ::decay \(Decay\)\)"):
        js.simulate(DECAY, ctx(dtype, t=float("nan")), 1.0, RK3)


@pytest.mark.parametrize("t_final", [[1.0, 2.0], np.ones((1,))])
def test_t_final_not_a_scalar(t_final):
    with pytest.raises(JaxsysError, match=r"simulate: t_final must be a real scalar time in seconds; got"):
        js.simulate(DECAY, ctx(), t_final, RK3)


def test_t_final_before_start_is_an_error():
    with pytest.raises(JaxsysError, match=r"t_final=1.0 is before the context's time 2.0"):
        js.simulate(DECAY, ctx(t=2.0), 1.0, RK3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "case", ["t_final before start", "t_final nan", "t_final inf", "time nan", "save_at nan", "save_at before start"]
)
def test_traced_bad_times_are_a_status_inside_jit(case, dtype):
    # under jit these are only known at run time: the run does nothing and says why (no max_steps burnt)
    t0, tf, ts = 2.0, 3.0, jnp.array([2.5, 2.9])
    if case == "t_final before start":
        tf = 1.0
    elif case == "t_final nan":
        tf = jnp.nan
    elif case == "t_final inf":
        tf = jnp.inf
    elif case == "time nan":
        t0 = jnp.nan
    elif case == "save_at nan":
        ts = jnp.array([2.5, jnp.nan])
    else:
        ts = jnp.array([1.5, 2.5])

    @jax.jit
    def run(t0, tf, ts):
        return js.simulate(DECAY, ctx(dtype).with_time(t0), tf, RK3, save_at=ts, throw=False)

    r = run(jnp.asarray(t0, dtype), jnp.asarray(tf, dtype), jnp.asarray(ts, dtype))
    assert status_of(r) is js.Status.BAD_TIMES
    assert int(r.stats.num_step_attempts) == 0
    assert "times are invalid" in r.message()
    with pytest.raises(Exception, match="times are invalid"):
        jax.jit(lambda a, b, c: js.simulate(DECAY, ctx(dtype).with_time(a), b, RK3, save_at=c).status)(
            jnp.asarray(t0, dtype), jnp.asarray(tf, dtype), jnp.asarray(ts, dtype)
        )


def test_traced_bad_times_under_vmap_flag_only_the_bad_members():
    tfs = jnp.array([1.0, jnp.nan, -1.0, 2.0])
    r = jax.vmap(lambda tf: js.simulate(DECAY, ctx(), tf, RK3, throw=False))(tfs)
    assert [js.Status.from_code(s) for s in r.status] == [
        js.Status.OK,
        js.Status.BAD_TIMES,
        js.Status.BAD_TIMES,
        js.Status.OK,
    ]
    np.testing.assert_allclose(r.context.get_continuous_state_vector()[[0, 3], 0], np.exp([-1.0, -2.0]), rtol=1e-3)


@pytest.mark.parametrize(
    "save_at, message",
    [
        (jnp.array([[0.5, 1.5]]), r"save_at must be a 1-D array of times; got shape \(1, 2\)"),
        (jnp.array([0.5, jnp.nan]), r"save_at holds a non-finite time at index 1"),
        (jnp.array([0.5, jnp.inf]), r"save_at holds a non-finite time at index 1"),
        (jnp.array([1.5, 0.5]), r"save_at must be strictly increasing; save_at\[1\] = 0.5 follows 1.5"),
        (jnp.array([0.5, 0.5]), r"save_at must be strictly increasing"),
        (jnp.array([0.5, 3.0]), r"save_at goes past t_final \(3.0 > 2.0\)"),
        (jnp.array([0.25, 1.5]), r"save_at\[0\] = 0.25 is before the context's time 0.5"),
        (["a", "b"], r"save_at must be an array of times in seconds; got \['a', 'b'\]"),
        (jnp.array([0.5 + 1j]), r"save_at must hold real times"),
    ],
)
def test_bad_save_at_is_an_error(save_at, message):
    with pytest.raises(JaxsysError, match=message):
        js.simulate(DECAY, ctx(t=0.5), 2.0, RK3, save_at=save_at)


def test_save_at_2d_is_an_error_even_under_jit():
    with pytest.raises(JaxsysError, match=r"save_at must be a 1-D array"):
        jax.jit(lambda ts: js.simulate(DECAY, ctx(), 2.0, RK3, save_at=ts).ys)(jnp.ones((2, 2)))


# ===== NaN and blow-up ============================================================================
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "integrator", [RK3, RK4, js.RadauIntegrator(max_step_size=0.1)], ids=["rk3", "rk4-fixed", "radau"]
)
def test_nan_initial_state_reports_nonfinite_at_once(integrator, dtype):
    r = js.simulate(DECAY, ctx(dtype, x=float("nan")), 1.0, integrator, throw=False)
    assert status_of(r) is js.Status.NONFINITE
    if not integrator.get_fixed_step_mode():
        assert int(r.stats.num_step_attempts) == 0
    with pytest.raises(Exception, match="NaN or infinite"):
        js.simulate(DECAY, ctx(dtype, x=float("nan")), 1.0, integrator)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "integrator", [RK3, js.RungeKutta5Integrator(max_step_size=0.1), RK4], ids=["rk3", "rk5", "rk4-fixed"]
)
def test_nan_dynamics_report_nonfinite_quickly(integrator, dtype):
    s = SqrtDynamics()
    r = js.simulate(s, s.create_default_context(dtype), 1.0, integrator, throw=False)
    assert status_of(r) is js.Status.NONFINITE
    assert int(r.stats.num_step_attempts) < 100  # not max_steps (1e6) attempts
    assert "max_steps" not in r.message()


@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_dynamics_under_jit_and_vmap(dtype):
    s = SqrtDynamics()
    base = s.create_default_context(dtype)
    r = jax.jit(lambda c: js.simulate(s, c, 1.0, RK3, throw=False))(base)
    assert status_of(r) is js.Status.NONFINITE
    xs = jnp.array([[1.0], [3.0]], dtype)  # NaN from the start / fine (x' = sqrt(x - 2) > 0)
    rv = jax.vmap(lambda x: js.simulate(s, base.with_continuous_state(x), 0.5, RK3, throw=False))(xs)
    assert [js.Status.from_code(v) for v in rv.status] == [js.Status.NONFINITE, js.Status.OK]


@pytest.mark.parametrize("dtype", DTYPES)
def test_finite_time_blow_up_stops_at_the_singularity(dtype):
    s = Riccati()
    integ = js.RungeKutta3Integrator(max_step_size=0.1, target_accuracy=1e-4)
    r = js.simulate(s, s.create_default_context(dtype), 2.0, integ, throw=False)
    assert status_of(r) in (js.Status.MIN_STEP, js.Status.NONFINITE)
    assert float(r.context.get_time()) <= 1.0 + 1e-3  # never past the singularity at t = 1
    rf = js.simulate(s, s.create_default_context(dtype), 2.0, js.RungeKutta4Integrator(max_step_size=0.01), throw=False)
    assert status_of(rf) is js.Status.NONFINITE


def test_max_steps_message_only_for_a_real_shortage():
    r = js.simulate(DECAY, ctx(), 100.0, RK3.with_options(max_steps=5), throw=False)
    assert status_of(r) is js.Status.MAX_STEPS and "Increase max_steps" in r.message()
    # a NaN, an infinite horizon or bad times never end in the max_steps status
    assert status_of(js.simulate(DECAY, ctx(x=float("nan")), 100.0, RK3, throw=False)) is not js.Status.MAX_STEPS
    r = jax.jit(lambda tf: js.simulate(DECAY, ctx(), tf, RK3, throw=False))(jnp.inf)
    assert status_of(r) is js.Status.BAD_TIMES


# ===== dtypes ======================================================================================
@pytest.mark.parametrize("dtype", [jnp.int32, jnp.int64, jnp.complex64, jnp.bool_])
def test_non_float_context_dtype_is_refused(dtype):
    with pytest.raises(
        JaxsysError, match=r"create_default_context: System ::decay \(Decay\): dtype must be a real floating dtype"
    ):
        DECAY.create_default_context(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_complex_state_is_refused(dtype):
    with pytest.raises(
        StateError,
        match=r"The continuous state of System ::decay \(Decay\) holds real numbers; the value given is complex",
    ):
        ctx(dtype).with_continuous_state(jnp.array([1.0 + 1j]))


def test_complex_time_is_refused():
    with pytest.raises(StateError, match=r"The time of System ::decay \(Decay\) holds real numbers"):
        ctx().with_time(1.0 + 2j)


def test_complex_parameter_is_refused():
    g = js.Gain(2.0, 1)
    with pytest.raises(StateError, match=r"holds real numbers; the value given is complex"):
        g.create_default_context().with_numeric_parameter(0, jnp.array([1.0 + 1j]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_complex_derivatives_are_refused(dtype):
    s = ComplexDynamics()
    with pytest.raises(
        StateError,
        match=r"do_calc_time_derivatives of System ::complex_dynamics \(ComplexDynamics\) returned dtype complex",
    ):
        js.simulate(s, s.create_default_context(dtype), 1.0, RK3)


# ===== batches =====================================================================================
def test_batched_context_to_simulate():
    batch = js.stack_contexts([ctx(), ctx(x=2.0)])
    with pytest.raises(
        JaxsysError, match=r"simulate: the context of System ::decay \(Decay\) is batched \(its time has shape \(2,\)\)"
    ):
        js.simulate(DECAY, batch, 1.0, RK3)


def test_unbatched_context_to_batch_simulate():
    with pytest.raises(JaxsysError, match=r"batch_simulate: the context is not batched \(its time has shape \(\)"):
        js.batch_simulate(DECAY, ctx(), 1.0, RK3)


def test_mismatched_batch_sizes():
    batch = js.stack_contexts([ctx(), ctx(x=2.0)])
    bad = eqx.tree_at(lambda c: c.time, batch, jnp.zeros((3,)))
    with pytest.raises(
        JaxsysError,
        match=r"batch_simulate: the batched context's arrays disagree on the batch size: time has 3 members",
    ):
        js.batch_simulate(DECAY, bad, 1.0, RK3)


def test_wrong_mesh_axis_name():
    from jax.sharding import Mesh

    mesh = Mesh(np.array(jax.devices()[:1]), ("batch",))
    batch = js.stack_contexts([ctx(), ctx(x=2.0)])
    with pytest.raises(
        JaxsysError, match=r"batch_simulate: axis_name='data' is not an axis of the mesh; its axes are \('batch',\)"
    ):
        js.batch_simulate(DECAY, batch, 1.0, RK3, mesh=mesh, axis_name="data")


def test_not_a_context_to_batch_simulate():
    with pytest.raises(JaxsysError, match=r"System ::decay \(Decay\) expected a Context, got list"):
        js.batch_simulate(DECAY, [ctx(), ctx()], 1.0, RK3)


# ===== code in the dynamics ======================================================================
@pytest.mark.parametrize(
    "system_cls, method", [(PythonIf, "do_calc_time_derivatives"), (PythonFloat, "do_calc_time_derivatives")]
)
@pytest.mark.parametrize("how", ["plain", "jit", "vmap"])
def test_python_control_flow_in_dynamics_names_the_system(system_cls, method, how):
    s = system_cls()
    c = s.create_default_context()
    call = lambda c: js.simulate(s, c, 1.0, RK3).context.get_time()  # noqa: E731
    if how == "jit":
        call = jax.jit(call)
    elif how == "vmap":
        c = js.stack_contexts([c, c])
        call = jax.vmap(call)
    with pytest.raises(
        JaxsysError, match=rf"simulate: System ::{s.get_name()} \({system_cls.__name__}\), method {method} .*jnp.where"
    ):
        call(c)


def test_python_control_flow_in_an_output_names_the_system():
    s = OutputIf()
    with pytest.raises(JaxsysError, match=r"System ::output_if \(OutputIf\), method calc_y"):
        js.simulate(
            s,
            s.create_default_context(),
            1.0,
            RK3,
            save_at=jnp.array([0.5]),
            record=lambda c: s.get_output_port(0).eval(c),
        )


# ===== integrator options (issue #15) =============================================================
@pytest.mark.parametrize("cls", [js.RungeKutta3Integrator, js.RungeKutta5Integrator, js.RadauIntegrator])
@pytest.mark.parametrize(
    "options, message",
    [
        (dict(max_step_size=0.0), r"max_step_size must be > 0; got 0.0"),
        (dict(max_step_size=-1.0), r"max_step_size must be > 0"),
        (dict(target_accuracy=0.0), r"target_accuracy must be > 0"),
        (dict(target_accuracy=-1e-3), r"target_accuracy must be > 0"),
        (dict(requested_minimum_step_size=-1.0), r"requested_minimum_step_size must be >= 0"),
        (dict(max_steps=0), r"max_steps must be >= 1"),
        (dict(stretch_factor=0.5), r"stretch_factor must be >= 1"),
        (dict(initial_step_size_target=0.0), r"initial_step_size_target must be > 0"),
    ],
)
def test_integrator_options(cls, options, message):
    with pytest.raises(JaxsysError, match=rf"{cls.__name__}: {message}"):
        cls(**options)


# ===== analysis: LQR =================================================================================
A2 = np.array([[0.0, 1.0], [0.0, 0.0]])
B2 = np.array([[0.0], [1.0]])


@pytest.mark.parametrize("fn", [js.linear_quadratic_regulator, js.continuous_algebraic_riccati])
@pytest.mark.parametrize(
    "args, message",
    [
        (
            (np.array([[1.0, 0.0], [0.0, -1.0]]), B2, np.eye(2), np.eye(1)),
            r"\(A, B\) is not stabilizable: the mode at eigenvalue 1",
        ),
        ((A2, np.zeros((2, 1)), np.eye(2), np.eye(1)), r"\(A, B\) is not stabilizable"),
        ((A2, B2, np.diag([0.0, 1.0]), np.eye(1)), r"\(A, Q\) is not detectable"),
        ((A2, B2, np.eye(2), np.zeros((1, 1))), r"R must be positive definite"),
        ((A2, B2, np.eye(2), -np.eye(1)), r"R must be positive definite"),
        ((A2, B2, np.array([[1.0, 2.0], [0.0, 1.0]]), np.eye(1)), r"Q must be symmetric"),
        ((A2, B2, -np.eye(2), np.eye(1)), r"Q must be positive semidefinite"),
        ((A2, B2, np.eye(3), np.eye(1)), r"Q must have shape \(2, 2\) .*got \(3, 3\)"),
        ((A2, B2, np.eye(2), np.eye(2)), r"R must have shape \(1, 1\) .*got \(2, 2\)"),
        ((A2, np.ones((3, 1)), np.eye(2), np.eye(1)), r"B must have shape \(2, 1\)"),
        ((np.ones(3), B2, np.eye(2), np.eye(1)), r"A must be a 2-D matrix; got shape \(3,\)"),
        ((A2, B2, np.full((2, 2), np.nan), np.eye(1)), r"Q has non-finite entries"),
    ],
)
def test_lqr_bad_problems(fn, args, message):
    with pytest.raises(JaxsysError, match=message):
        fn(*args)


def test_lqr_good_problem_still_works_under_jit_and_grad():
    K, _ = js.linear_quadratic_regulator(A2, B2, np.eye(2), np.eye(1))
    np.testing.assert_allclose(np.asarray(K), [[1.0, np.sqrt(3.0)]], rtol=1e-6)
    Kj = jax.jit(lambda q: js.linear_quadratic_regulator(A2, B2, q * jnp.eye(2), jnp.eye(1))[0])(1.0)
    np.testing.assert_allclose(np.asarray(Kj), np.asarray(K), rtol=1e-6)
    g = jax.grad(lambda q: js.linear_quadratic_regulator(A2, B2, q * jnp.eye(2), jnp.eye(1))[0][0, 0])(1.0)
    assert np.isfinite(float(g))


def test_lqr_shape_errors_under_jit():
    with pytest.raises(JaxsysError, match=r"Q must have shape \(2, 2\)"):
        jax.jit(lambda q: js.linear_quadratic_regulator(A2, B2, q, jnp.eye(1))[0])(jnp.eye(3))


# ===== analysis: fit_parameters ======================================================================
class Lag(js.LeafSystem):
    """x' = -a x (parameter group 0: [a])."""

    def __init__(self) -> None:
        super().__init__("lag")
        self.declare_continuous_state(1, default=[1.0])
        self.declare_numeric_parameter([1.0])

    def do_calc_time_derivatives(self, context: Any) -> Any:
        return -context.get_numeric_parameter(0)[0] * context.get_continuous_state_vector()


LAG = Lag()
TIMES = np.linspace(0.1, 1.0, 10)
MEAS = np.exp(-2.0 * TIMES)[None, :, None]


@pytest.mark.parametrize(
    "params, message",
    [
        ({"a": js.FitParameter(3)}, r"params\['a'\] names numeric parameter group 3; the context has 1 group\(s\)"),
        (
            {"a": js.FitParameter(0, 5)},
            r"params\['a'\] names element 5 of numeric parameter group 0, which has 1 element",
        ),
        ({"a": js.FitParameter(0, lower=2.0, upper=1.0)}, r"params\['a'\] has lower=2.0 >= upper=1.0"),
        ({}, r"params is empty"),
        ({"a": 0}, r"params\['a'\] must be a FitParameter"),
    ],
)
def test_fit_bad_parameters(params, message):
    with pytest.raises(JaxsysError, match=rf"fit_parameters: {message}"):
        js.fit_parameters(LAG, LAG.create_default_context(), params, TIMES, MEAS, steps=1)


@pytest.mark.parametrize(
    "times, meas, message",
    [
        (
            TIMES,
            np.exp(-2.0 * TIMES)[None, :, None].repeat(2, axis=2),
            r"measurements must have shape .* = \(1, 10, 1\).*got \(1, 10, 2\)",
        ),
        (TIMES, np.exp(-2.0 * TIMES)[None, :5, None], r"measurements must have shape .*got \(1, 5, 1\)"),
        (TIMES, np.exp(-2.0 * TIMES)[:, None], r"measurements must have shape .*got \(10, 1\)"),
        (np.ones((2, 2, 2)), MEAS, r"times must have shape \(n,\)"),
        (np.array([0.1, np.nan]), np.ones((1, 2, 1)), r"times must be finite"),
    ],
)
def test_fit_bad_measurements(times, meas, message):
    with pytest.raises(JaxsysError, match=rf"fit_parameters: {message}"):
        js.fit_parameters(LAG, LAG.create_default_context(), {"a": js.FitParameter(0)}, times, meas, steps=1)


def test_fit_initial_must_name_the_parameters():
    with pytest.raises(JaxsysError, match=r"fit_parameters: initial names \['b'\]"):
        js.fit_parameters(LAG, LAG.create_default_context(), {"a": js.FitParameter(0)}, TIMES, MEAS, initial={"b": 1.0})


@pytest.mark.parametrize("times", [TIMES, TIMES.tolist(), jnp.asarray(TIMES)], ids=["numpy", "list", "jax"])
def test_fit_accepts_numpy_list_and_jax_times(times):
    r = js.fit_parameters(
        LAG,
        LAG.create_default_context(),
        {"a": js.FitParameter(0, positive=True)},
        times,
        MEAS,
        steps=200,
        optimizer=None,
    )
    assert abs(r.params["a"] - 2.0) < 0.05


# ===== primitives =====================================================================================
@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: js.Gain([1.0, 2.0, 3.0], 2),
            r"Gain: the gain k must be a scalar or have one value per element \(size 2\); got shape \(3,\)",
        ),
        (lambda: js.Gain(np.ones((2, 2)), 2), r"Gain: the gain k must be a scalar or have one value per element"),
        (lambda: js.Gain("2", 2), None),
        (lambda: js.Gain(float("nan"), 2), r"Gain: the gain k must be finite"),
        (lambda: js.Gain(1.0, 0), r"Gain: size must be a positive integer; got 0"),
        (lambda: js.Gain(1.0, 1.5), r"Gain: size must be a positive integer; got 1.5"),
        (
            lambda: js.FirstOrderLowPassFilter(0.0, 2),
            r"FirstOrderLowPassFilter: time_constant must be > 0; got 0.0",
        ),
        (lambda: js.FirstOrderLowPassFilter(-1.0), r"FirstOrderLowPassFilter: time_constant must be > 0"),
        (
            lambda: js.FirstOrderLowPassFilter([1.0, 2.0, 3.0], 2),
            r"FirstOrderLowPassFilter: time_constant must be a scalar or have one value per element",
        ),
        (
            lambda: js.Sine([1.0, 2.0], 1.0, 0.0, 3),
            r"Sine: amplitude must be a scalar or have one value per element \(size 3\)",
        ),
    ],
)
def test_primitive_constructor_errors(make, message):
    if message is None:  # a numeric string is a number to NumPy; accepted as 2.0
        assert float(make().create_default_context().get_numeric_parameter(0)[0]) == 2.0
        return
    with pytest.raises(JaxsysError, match=message):
        make()


@pytest.mark.parametrize(
    "value, message",
    [
        ("abc", r"InputPort.fix_value: expected a numeric vector of size 2 .* but the value given is str"),
        (None, r"expected a numeric vector of size 2"),
        ([1.0, 2.0, 3.0], r"expected a vector of size 2 .* has shape \(3,\)"),
        (jnp.array([1.0 + 1j, 0.0]), r"expected a real vector of size 2"),
        ({"a": 1.0}, r"expected a numeric vector of size 2"),
    ],
)
def test_fix_value_bad_values(value, message):
    g = js.Gain(1.0, 2)
    with pytest.raises(PortError, match=message):
        g.get_input_port(0).fix_value(g.create_default_context(), value)


# ===== trajectory optimization ========================================================================
def test_trajopt_reports_failure():
    from jaxsys.examples import Pendulum

    p = Pendulum()
    c = p.create_default_context().with_continuous_state(jnp.array([0.0, 0.0]))
    goal = jnp.array([np.pi, 0.0])
    with pytest.warns(
        UserWarning,
        match=r"direct_collocation: did not converge \(SLSQP: Iteration limit reached\): constraint violation .* "
        r"Options that control convergence: max_iterations \(now 2\)",
    ):
        r = js.direct_collocation(p, c, 2.0, 10, lambda x, u: u @ u, x_final=goal, max_iterations=2)
    assert r.success is False and r.constraint_violation > r.tolerance
    with pytest.warns(UserWarning, match=r"outer_iterations \(now 1\), inner_iterations \(now 2\)"):
        r = js.direct_collocation(
            p,
            c,
            2.0,
            10,
            lambda x, u: u @ u,
            x_final=goal,
            solver="augmented_lagrangian",
            outer_iterations=1,
            inner_iterations=2,
        )
    assert r.success is False
    with pytest.raises(js.JaxsysError, match=r"Unknown option\(s\) \['outer_iterations'\] for solver='slsqp'"):
        js.direct_collocation(p, c, 2.0, 10, lambda x, u: u @ u, x_final=goal, outer_iterations=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ok = js.direct_collocation(p, c, 2.0, 10, lambda x, u: u @ u, x_final=jnp.array([0.0, 0.0]))
    assert ok.success is True


def test_advance_pending_events_names_the_expected_pending_flags():
    """A wrong ``pending_witness_events`` (shape or dtype) is an error naming the system and the shape
    expected (one flag per witness, then per timed event), raised while the compiled program is built,
    not a shape error from inside it."""
    ball = js.examples.BouncingBall()
    ctx = ball.create_default_context()
    n = js.simulate(ball, ctx, 0.1).pending_witness_events.shape
    for bad in (jnp.zeros(n[0] + 1, bool), jnp.zeros(n, jnp.float32)):
        with pytest.raises(
            JaxsysError, match=rf"pending_witness_events must be a bool array of shape \({n[0]},\).*System ::ball"
        ):
            js.advance_pending_events(ball, ctx, bad)
    assert float(js.advance_pending_events(ball, ctx, jnp.zeros(n, bool)).get_time()) == 0.0  # (the right flags)


@pytest.mark.parametrize(
    "integrator", [RK3, js.RungeKutta4Integrator(max_step_size=0.1)], ids=["error-controlled", "fixed-step"]
)
def test_save_times_that_collide_in_float32_are_an_error_at_the_call(integrator):
    # valid as given (float64 values: the eager checks pass) but equal once rounded to the float32 run's
    # dtype: the call says so (the same times traced inside jit are the run's BAD_TIMES status)
    ts = np.array([0.5, 0.5 + 1e-9, 1.0])
    c32 = ctx(jnp.float32)
    with pytest.raises(
        JaxsysError, match=r"save_at\[1\] = 0.500000001 and save_at\[0\] = 0.5 are equal once rounded to float32"
    ):
        js.simulate(DECAY, c32, 1.0, integrator, save_at=ts)
    r = js.simulate(DECAY, c32, 1.0, integrator, save_at=ts, throw=False)
    traced = jax.jit(lambda t: js.simulate(DECAY, c32, 1.0, integrator, save_at=t, throw=False))(
        jnp.asarray(ts, jnp.float32)
    )
    assert status_of(r) is js.Status.BAD_TIMES and status_of(traced) is js.Status.BAD_TIMES
    # valid times: the call (its times checked on the host) and the traced run agree, with the closed form
    good = np.array([0.25, 0.5, 1.0])
    r = js.simulate(DECAY, c32, 1.0, integrator, save_at=good)
    traced = jax.jit(lambda t: js.simulate(DECAY, c32, 1.0, integrator, save_at=t))(jnp.asarray(good, jnp.float32))
    assert status_of(r) is js.Status.OK
    np.testing.assert_allclose(np.asarray(r.ys).reshape(-1), np.asarray(traced.ys).reshape(-1), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(r.ys).reshape(-1), np.exp(-good), rtol=1e-3)
