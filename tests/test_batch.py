"""Batched, sharded and multi-process simulation (issue: batch_simulate on JAX's own machinery)."""

import json
import os
import pathlib
import socket
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from multiprocess_common import N, batch, loss_of_result

import jaxsys as js
from jaxsys.analysis.batch import Normal, Uniform, batch_simulate, randomize_contexts, stack_contexts
from jaxsys.examples import Pendulum


HERE = pathlib.Path(__file__).parent


def test_stack_and_randomize_contexts():
    p = Pendulum()
    base = p.get_input_port(0).fix_value(p.create_default_context(), [0.0])
    stacked = stack_contexts([base.with_continuous_state(jnp.array([t, 0.0])) for t in (0.1, 0.2, 0.3)])
    np.testing.assert_allclose(stacked.state.continuous_state.x[:, 0], [0.1, 0.2, 0.3])
    with pytest.raises(js.JaxsysError, match="different systems"):
        stack_contexts([base, Pendulum().create_default_context()])
    r = randomize_contexts(
        jax.random.PRNGKey(0), base, 500, parameters={(0, 1): Uniform(0.5, 2.0), (0, 2): Normal(0.1, 0.01)}
    )
    lengths = r.parameters.numeric[0][:, 1]
    assert 0.5 <= float(lengths.min()) and float(lengths.max()) < 2.0 and abs(float(lengths.mean()) - 1.25) < 0.05
    assert abs(float(r.parameters.numeric[0][:, 2].std()) - 0.01) < 0.002
    np.testing.assert_array_equal(r.parameters.numeric[0][:, 0], 1.0)  # only the chosen values vary
    np.testing.assert_array_equal(r.state.continuous_state.x, 0.0)


def test_batch_simulate_equals_separate_runs():
    plant, ctxs = batch()
    integ = js.RungeKutta4Integrator(max_step_size=1e-2)
    r = batch_simulate(plant, ctxs, 1.0, integ)
    for i in (0, 5, N - 1):
        single = js.simulate(plant, jax.tree_util.tree_map(lambda x, i=i: x[i], ctxs), 1.0, integ)
        np.testing.assert_allclose(
            r.results().context.state.continuous_state.x[i], single.context.get_continuous_state_vector(), rtol=1e-13
        )


def test_sharded_equals_unsharded_on_8_devices():
    env = dict(os.environ, PYTHONPATH=str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(
        [sys.executable, str(HERE / "sharding_worker.py")], capture_output=True, text=True, timeout=600, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["devices"] == 8
    for name in ("fixed", "error_controlled"):
        assert res[name]["max_diff"] <= 1e-12, res[name]
        assert res[name]["mean_diff"] <= 1e-12
        assert res[name]["padded"] == 16 and "batch" in res[name]["sharding"]
    assert res["hybrid"]["max_diff"] <= 1e-12
    assert len(set(res["hybrid"]["impacts"])) > 1  # members bounced a different number of times
    np.testing.assert_allclose(res["grad"]["sharded"], res["grad"]["single"], rtol=1e-12)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_on_loopback_agree_with_one(tmp_path):
    port = str(_free_port())
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / "multiprocess_worker.py"), str(i), port, str(tmp_path / f"{i}.json")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for i in range(2)
    ]
    try:
        for p in procs:
            p.wait(timeout=300)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p in procs:
        assert p.returncode == 0, p.stderr.read().decode()[-3000:]
    results = [json.loads((tmp_path / f"{i}.json").read_text()) for i in range(2)]
    assert all(r["processes"] == 2 and r["devices"] == 4 and r["local_devices"] == 2 for r in results)
    # reference: one process, one device, the whole batch
    plant, ctxs = batch()
    integ = js.RungeKutta4Integrator(max_step_size=1e-2)
    ref_mean = float(batch_simulate(plant, ctxs, 1.0, integ).mean(loss_of_result))

    def loss(length):
        c = jax.vmap(lambda c: c.with_numeric_parameter(0, c.get_numeric_parameter(0).at[1].set(length)))(ctxs)
        return batch_simulate(plant, c, 1.0, integ).mean(loss_of_result)

    ref_grad = float(jax.grad(loss)(1.2))
    for r in results:
        np.testing.assert_allclose(r["mean"], ref_mean, rtol=1e-12)
        np.testing.assert_allclose(r["grad"], ref_grad, rtol=1e-12)
