"""One process of a two-process run (tests/test_batch.py): jax.distributed over loopback with the gloo
CPU collectives, 2 CPU devices per process, one sharded batch simulation and one gradient.

Usage: python multiprocess_worker.py PROCESS_ID PORT OUTPUT_JSON
"""

import json
import os
import sys


os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import jax  # noqa: E402


jax.config.update("jax_enable_x64", True)
jax.config.update("jax_cpu_collectives_implementation", "gloo")


def main() -> None:
    pid, port, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=pid, initialization_timeout=60
    )
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh
    from multiprocess_common import N, batch, loss_of_result

    import jaxsys as js
    from jaxsys.analysis.batch import batch_simulate, shard_batch

    mesh = Mesh(np.array(jax.devices()), ("batch",))  # 4 devices over 2 processes
    plant, ctxs = batch()
    local = jax.tree_util.tree_map(lambda x: x[pid * N // 2 : (pid + 1) * N // 2], ctxs)  # this process's half
    integ = js.RungeKutta4Integrator(max_step_size=1e-2)
    r = batch_simulate(plant, local, 1.0, integ, mesh=mesh, process_local=True)
    mean = float(r.mean(loss_of_result))
    global_batch, _, _ = shard_batch(local, mesh, process_local=True)

    def loss(length):
        c = jax.vmap(lambda c: c.with_numeric_parameter(0, c.get_numeric_parameter(0).at[1].set(length)))(global_batch)
        return batch_simulate(plant, c, 1.0, integ, mesh=mesh).mean(loss_of_result)

    grad = float(jax.grad(loss)(1.2))
    with open(path, "w") as f:
        json.dump(
            {
                "pid": pid,
                "processes": jax.process_count(),
                "devices": jax.device_count(),
                "local_devices": jax.local_device_count(),
                "mean": mean,
                "grad": grad,
            },
            f,
        )
    jax.distributed.shutdown()
    del jnp


if __name__ == "__main__":
    main()
