"""Full-precision matrix products for everything that integrates or differentiates a run.

On GPUs JAX lets float32 matrix products default to TensorFloat-32 (~1e-3 relative). The integrators'
stage combinations (``b @ K``, Radau5's transformations), Newton's products and a model's own ``A @ x``
are such products: on an H200, Radau5 on a float32 batch then reached no error below 7.2e-5 at any
accuracy (9.3e-6 at 3e-4 with full precision, as on a CPU; benchmarks/RESULTS.md, stop 57). Runs are
traced under `full_precision` (simulate and what calls it, ``discrete_dynamics``, pending updates, the
Simulator's initialization, the ECS plant bridge); products built outside those traces (the
derivative machinery's own) pass `HIGHEST`. No effect on a CPU.
"""

from __future__ import annotations

from typing import Any

import jax


HIGHEST = jax.lax.Precision.HIGHEST
"""The ``precision=`` of the products jaxsys builds outside a `full_precision` trace."""


def full_precision() -> Any:
    """A context in which every matrix product traced asks for full precision
    (``jax.default_matmul_precision("highest")``)."""
    return jax.default_matmul_precision("highest")
