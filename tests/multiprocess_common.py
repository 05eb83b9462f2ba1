"""The batch shared by tests/test_batch.py and tests/multiprocess_worker.py (built identically in every process)."""

import jax


N = 12


def batch():
    from jaxsys.analysis.batch import Uniform, randomize_contexts
    from jaxsys.examples import Pendulum

    plant = Pendulum()
    base = plant.get_input_port(0).fix_value(plant.create_default_context(), [0.0])
    ctxs = randomize_contexts(
        jax.random.PRNGKey(42), base, N, parameters={(0, 1): Uniform(0.5, 2.0)}, states={0: Uniform(0.1, 1.5)}
    )
    return plant, ctxs


def loss_of_result(r):
    return r.context.get_continuous_state_vector()[0] ** 2
