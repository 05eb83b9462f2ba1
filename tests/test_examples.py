"""The example scripts run and print checkable numbers."""

import pathlib
import re
import subprocess
import sys

import pytest


ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_quickstart_runs_and_its_numbers_check_out():
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    # At steady state the controller torque balances gravity: tau = m g l sin(theta).
    tau, gravity = map(float, re.search(r"final torque\s+(\S+) N m\s+\(= m g l sin\(theta\) = (\S+)\)", text).groups())
    assert abs(tau - gravity) < 1e-2
    g, fd = map(float, re.search(r"d\(theta_final\)/dkp\s+(\S+)\s+\(finite differences\s+(\S+)\)", text).groups())
    assert abs(g - fd) <= 1e-4 * abs(fd)
    png = ROOT / "examples" / "output" / "quickstart.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def run_example(name):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / name)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_pendulum_pid_settles_with_integral_action_holding_gravity():
    text = run_example("pendulum_pid.py")
    angle = float(re.search(r"final angle\s+(\S+)", text).group(1))
    tau, grav = map(float, re.search(r"final torque\s+(\S+) N m \(gravity: (\S+)\)", text).groups())
    assert abs(angle - 1.0) < 1e-4 and abs(tau - grav) < 1e-3
    assert (ROOT / "examples" / "output" / "pendulum_pid.png").read_bytes()[:4] == b"\x89PNG"


def test_bouncing_ball_example_gradient_matches_fd():
    text = run_example("bouncing_ball.py")
    assert int(re.search(r"impacts: (\d+)", text).group(1)) == 4
    g, fd = map(float, re.search(r"restitution = (\S+) \(finite differences (\S+)\)", text).groups())
    assert abs(g - fd) < 1e-6 * abs(fd)


def test_cartpole_energy_example_conserves_energy():
    text = run_example("cartpole_energy.py")
    assert float(re.search(r"max drift over 10 s (\S+) J", text).group(1)) < 1e-8


def test_parameter_fitting_example_recovers_truth():
    text = run_example("parameter_fitting.py")
    assert abs(float(re.search(r"fitted length\s+(\S+)", text).group(1)) - 1.3) < 0.013
    assert abs(float(re.search(r"fitted damping\s+(\S+)", text).group(1)) - 0.2) < 0.004


def test_lqr_example_balances_the_cart_pole():
    text = run_example("lqr_stabilization.py")
    final = re.search(r"final state \[x, theta - pi, xdot, thetadot\]: \[([^\]]+)\]", text).group(1)
    assert max(abs(float(v)) for v in final.split()) < 1e-2


def test_trajectory_optimization_example_reaches_the_top():
    text = run_example("trajectory_optimization.py")
    dev = re.search(r"simulated final state - goal: \[([^\]]+)\]", text).group(1).split()
    assert abs(float(dev[1])) < 0.05 and abs(float(dev[0])) < 0.05


def test_kalman_lqr_example_estimates_better_than_the_sensor_and_balances():
    text = run_example("kalman_lqr_pendulum.py")
    est, meas, rate = map(
        float, re.search(r"angle ([\d.]+) rad \(measurement noise rms ([\d.]+)\), rate ([\d.]+)", text).groups()
    )
    assert est < 0.5 * meas  # the filter beats the raw sensor by more than 2x
    assert rate < 0.2  # the never-measured rate is estimated
    final = float(re.search(r"final angle - pi: ([-+\d.]+)", text).group(1))
    assert abs(final) < 0.1  # balanced near the top


def test_batched_simulation_example_energy_decreases_everywhere():
    text = run_example("batched_simulation.py")
    n_dec, n = map(int, re.search(r"members whose energy decreased: (\d+) of (\d+)", text).groups())
    assert n_dec == n == 4096


def test_ecs_particles_example():
    import importlib.util

    import jax.numpy as jnp

    spec = importlib.util.spec_from_file_location("ecs_particles", ROOT / "examples" / "ecs_particles.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["ecs_particles"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    text = run_example("ecs_particles.py")
    left = int(re.search(r"(\d+) of 300 particles left", text).group(1))
    # nothing acts horizontally, so x(t) = x0 + vx t exactly: the survivors are known in advance
    w = mod.make_world()
    x_final = w.column("pos")[:, 0] + 10.0 * w.column("vel")[:, 0]
    assert left == int(jnp.sum(w.each(["pos"]) & (jnp.abs(x_final) <= 5.0)))
    assert abs(float(re.search(r"controlled particles' mean height (\S+)", text).group(1)) - 2.0) < 1e-3
    assert float(re.search(r"free particles' mean height (\S+)", text).group(1)) < 1e-3


def test_large_diagram_and_sampling_example():
    text = run_example("large_diagram_and_sampling.py")
    # 201 subsystems, their contexts stored stacked: a handful of arrays
    assert int(re.search(r"context arrays for 201 subsystems: (\d+)", text).group(1)) <= 10
    # the chain of lags against the Erlang distribution function
    assert float(re.search(r"chain max error vs exact (\S+)", text).group(1)) < 1e-7
    plain = int(re.search(r"steps without samples (\d+)", text).group(1))
    stepped = int(re.search(r"steps stepping to 1000 samples (\d+)", text).group(1))
    dense = int(re.search(r"steps with dense output (\d+)", text).group(1))
    assert dense == plain < stepped
    assert float(re.search(r"max difference of the samples (\S+)", text).group(1)) < 1e-6
    assert (ROOT / "examples" / "output" / "sampling.png").read_bytes()[:4] == b"\x89PNG"


def test_porting_from_pydrake_example_matches_the_exact_sampled_data_solution():
    text = run_example("porting_from_pydrake.py")
    assert float(re.search(r"max error (\S+)", text).group(1)) < 1e-8
    g, fd = map(float, re.search(r"d\(final position\)/dkp (\S+) \(finite differences (\S+)\)", text).groups())
    assert abs(g - fd) <= 1e-5 * abs(fd)


def test_mpc_swings_the_pendulum_up_within_the_torque_limit():
    text = run_example("mpc_pendulum.py")
    error = float(re.search(r"final angle error\s+(\S+) rad", text).group(1))
    torque = float(re.search(r"largest torque\s+(\S+) N m", text).group(1))
    assert error < 1e-3 and torque <= 4.0 + 1e-9
    assert (ROOT / "examples" / "output" / "mpc_pendulum.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow  # (a robot example end to end, 14-27 s; CI runs it: pytest -m slow)
def test_robot_arm_fitting_example_recovers_masses_and_damping_within_standard_errors():
    pytest.importorskip("mujoco")
    text = run_example("robot_arm_fitting.py")
    rows = re.findall(r"^(mass_\w+|damping_\w+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)$", text, flags=re.M)
    assert len(rows) == 6
    for _, nominal, truth, fitted, se, _ in rows:
        nominal, truth, fitted, se = map(float, (nominal, truth, fitted, se))
        assert abs(fitted - truth) < 4 * se  # within the fit's standard errors (4 sigma: 6 parameters)
        assert abs(fitted - truth) < 0.2 * abs(truth - nominal)  # and far closer than where it started
    assert (ROOT / "examples" / "output" / "robot_arm_fitting.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow  # (a robot example end to end, 14-27 s; CI runs it: pytest -m slow)
def test_robot_domain_randomization_example_follows_coulomb_friction():
    """1,024 boxes with random mass and friction: each stops after ~v0²/(2 μ g) whatever its mass
    (MuJoCo's contacts are soft and the box rocks as it stops: 3% median, 15% worst, stated here)."""
    pytest.importorskip("mujoco")
    text = run_example("robot_domain_randomization.py")
    assert re.search(r"members 1024", text)
    assert float(re.search(r"largest final speed (\S+) m/s", text).group(1)) < 0.05
    med, worst = map(float, re.search(r"median \|error\| (\S+), largest (\S+)", text).groups())
    assert med < 0.03 and worst < 0.15
    assert abs(float(re.search(r"correlation of the error with mass (\S+)", text).group(1))) < 0.3


@pytest.mark.slow  # (a robot example end to end, 14-27 s; CI runs it: pytest -m slow)
def test_robot_swing_up_example_reaches_upright_and_the_plan_works_on_the_equations():
    pytest.importorskip("mujoco")
    text = run_example("robot_swing_up.py")
    assert "converged True" in text
    theta_mjx = float(re.search(r"\(MJX plan\)\s+x \S+\s+theta (\S+)", text).group(1))
    theta_eq = float(re.search(r"\(equations\)\s+x \S+\s+theta (\S+)", text).group(1))
    assert abs(theta_mjx - 3.14159) < 1e-2 and abs(theta_eq - 3.14159) < 1e-2
    assert float(re.search(r"misses the MJX plan by (\S+)", text).group(1)) < 1e-2
    assert float(re.search(r"largest \|force\| (\S+) N", text).group(1)) <= 20.0 + 1e-9


@pytest.mark.slow  # (a robot example end to end, 14-27 s; CI runs it: pytest -m slow)
def test_robot_quadruped_pd_example_stands_up_tall_and_level():
    """A PD controller Diagram around MJX's Barkour quadruped (discrete): from the keyframe's stance to a
    taller one, level throughout, at rest at the end (P control leaves a gravity-load offset: < 0.15 rad)."""
    pytest.importorskip("mujoco")
    text = run_example("robot_quadruped_pd.py")
    settled, final = map(float, re.search(r"trunk height: (\S+) m settled.*, (\S+) m at the end", text).groups())
    assert final > settled + 0.1
    assert float(re.search(r"quaternion w: min (\S+)", text).group(1)) > 0.999
    assert float(re.search(r"largest joint error at the end (\S+) rad", text).group(1)) < 0.15
    assert float(re.search(r"largest speed at the end (\S+)", text).group(1)) < 0.05
