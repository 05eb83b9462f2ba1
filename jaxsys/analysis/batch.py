"""Batched, sharded and multi-process simulation on JAX's own machinery.

* [`stack_contexts`][jaxsys.stack_contexts] / [`randomize_contexts`][jaxsys.randomize_contexts] build a
  batch: a context whose leaves have a leading batch axis.
* [`batch_simulate`][jaxsys.batch_simulate] runs ``jit(vmap(simulate))`` over the batch. With a
  ``jax.sharding.Mesh`` the batch axis is sharded over the mesh's devices (``NamedSharding``);
  results come back sharded as global arrays, and reductions over the batch (`BatchResult.mean`)
  run where the data is. A batch that does not divide the device count is padded (with copies of
  its last member) and masked.
* Multi-process: after ``jax.distributed.initialize(...)`` (one process per host or device group,
  CPU collectives: ``jax.config.update("jax_cpu_collectives_implementation", "gloo")``) build a mesh
  over ``jax.devices()`` (all processes' devices) and call ``batch_simulate(..., process_local=True)``
  with each process's own slice of the batch; the result is one global array.

Imports (within jaxsys): the framework's ``context``, ``errors``, ``system``; ``integrators``,
``results``, ``simulate``.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..framework.context import Context
from ..framework.dispatch import event_leaves
from ..framework.errors import JaxsysError
from ..framework.ids import same_structure
from ..framework.system import System
from . import simulate as simulate_module
from .compile_cache import SystemCache, deref
from .integrators import IntegratorBase
from .results import SimulationResult
from .simulate import simulate


def stack_contexts(contexts: Sequence[Context]) -> Context:
    """One batched context from contexts of the same system (a leading batch axis on every leaf)."""
    contexts = list(contexts)
    if not contexts:
        raise JaxsysError("stack_contexts: no contexts given.")
    ids = {c.get_system_id() for c in contexts}
    if len(ids) != 1:
        raise JaxsysError(
            f"stack_contexts: the contexts were made by {len(ids)} different systems; stack contexts of one system."
        )
    structure = jax.tree_util.tree_structure(contexts[0])
    for i, c in enumerate(contexts):
        if not same_structure(jax.tree_util.tree_structure(c), structure):
            raise JaxsysError(
                f"stack_contexts: context {i} does not have the structure of context 0 (e.g. a different fixed input)."
            )
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *contexts)


def batch_size(contexts: Context, caller: str = "batch_size") -> int:
    """The number of members of a batched context (checked: every array has that leading axis)."""
    if not isinstance(contexts, Context):
        raise JaxsysError(f"{caller}: expected a batched Context; got {type(contexts).__name__}.")
    shape = tuple(jnp.shape(contexts.time))
    if len(shape) != 1:
        raise JaxsysError(
            f"{caller}: the context is not batched (its time has shape {shape}, a batch has shape (n,)). Make a "
            f"batch with js.stack_contexts([...]) or js.randomize_contexts(...); for one context use js.simulate."
        )
    n = shape[0]
    for path, leaf in jax.tree_util.tree_leaves_with_path(contexts):
        if jnp.ndim(leaf) == 0 or jnp.shape(leaf)[0] != n:
            raise JaxsysError(
                f"{caller}: the batched context's arrays disagree on the batch size: time has {n} members, "
                f"{jax.tree_util.keystr(path)} has shape {tuple(jnp.shape(leaf))}. Build the batch with "
                f"js.stack_contexts or js.randomize_contexts."
            )
    return int(n)


@dataclasses.dataclass(frozen=True)
class Uniform:
    """Uniform distribution on [low, high)."""

    low: float
    high: float

    def sample(self, key: Any, shape: tuple[int, ...], dtype: Any) -> jax.Array:
        return jax.random.uniform(key, shape, dtype, self.low, self.high)


@dataclasses.dataclass(frozen=True)
class Normal:
    """Normal distribution with mean and standard deviation."""

    mean: float
    std: float

    def sample(self, key: Any, shape: tuple[int, ...], dtype: Any) -> jax.Array:
        return self.mean + self.std * jax.random.normal(key, shape, dtype)


def _sample(dist: Any, key: Any, shape: tuple[int, ...], dtype: Any) -> jax.Array:
    if hasattr(dist, "sample"):
        return dist.sample(key, shape, dtype)
    if callable(dist):
        return jnp.asarray(dist(key, shape), dtype)
    lo, hi = dist
    return jax.random.uniform(key, shape, dtype, lo, hi)


def randomize_contexts(
    key: Any,
    context: Context,
    n: int,
    parameters: Mapping[Any, Any] | None = None,
    states: Mapping[int, Any] | None = None,
) -> Context:
    """A batch of ``n`` copies of ``context`` in which only the chosen values are random.

    **Arguments:**
    - `parameters`: ``{group: dist}`` (a whole numeric parameter group) or ``{(group, element): dist}``.
    - `states`: ``{index: dist}`` for elements of the continuous state vector.
    - a `dist` is [`Uniform`][jaxsys.Uniform], [`Normal`][jaxsys.Normal], a ``(low, high)`` pair (uniform), or
      ``f(key, shape) -> array``.
    Everything else is the same in every member (MJX users' "randomise only these fields").
    """
    parameters = dict(parameters or {})
    states = dict(states or {})
    keys = jax.random.split(key, len(parameters) + len(states) + 1)
    batch = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (n,) + jnp.shape(x)), context)
    dtype = context.time.dtype
    kit = iter(keys)
    for target, dist in parameters.items():
        group, element = (target, None) if isinstance(target, int) else target
        base = context.get_numeric_parameter(group)
        shape = (n,) if element is not None else (n,) + base.shape
        draws = _sample(dist, next(kit), shape, dtype)

        def setp(c: Context, d: Any, group: int = group, element: Any = element) -> Context:
            value = c.get_numeric_parameter(group)
            return c.with_numeric_parameter(group, value.at[element].set(d) if element is not None else d)

        batch = jax.vmap(setp)(batch, draws)
    for index, dist in states.items():
        draws = _sample(dist, next(kit), (n,), dtype)

        def sets(c: Context, d: Any, index: int = index) -> Context:
            return c.with_continuous_state(c.get_continuous_state_vector().at[index].set(d))

        batch = jax.vmap(sets)(batch, draws)
    return batch


class BatchResult(eqx.Module):
    """The result of [`batch_simulate`][jaxsys.batch_simulate].

    **Fields:** `result` (a SimulationResult whose leaves have a leading batch axis, possibly padded and
    sharded), `mask` (which batch entries are real members), `num_members` (static).
    """

    result: SimulationResult
    mask: jax.Array
    num_members: int = eqx.field(static=True)

    def results(self) -> SimulationResult:
        """The members only (padding removed); needs the data addressable by this process."""
        return jax.tree_util.tree_map(lambda x: x[: self.num_members], self.result)

    def mean(self, fn: Callable[[SimulationResult], Any]) -> Any:
        """Mean over the members of ``fn(member result)`` (padding excluded); computed where the data is."""
        values = jax.vmap(fn)(self.result)
        w = self.mask.astype(jnp.result_type(float)) / self.num_members

        def reduce(v: jax.Array) -> jax.Array:
            return jnp.tensordot(w, v, axes=(0, 0))

        return jax.tree_util.tree_map(reduce, values)


def _pad(tree: Any, total: int) -> Any:
    def pad(x: jax.Array) -> jax.Array:
        extra = total - x.shape[0]
        if extra == 0:
            return x
        return jnp.concatenate([x, jnp.repeat(x[-1:], extra, axis=0)])

    return jax.tree_util.tree_map(pad, tree)


_RUNNERS: SystemCache[Any] = SystemCache("batch_simulate", maxsize=64)


def _runner(system: System, integrator: Any, t_final: float, save_at: Any, record: Any, options: Any) -> Any:
    """The jitted vmap(simulate) for these settings (cached: one compilation per configuration)."""
    key = (integrator, t_final, save_at, record, options)

    def build(ref: Any) -> Any:
        kwargs = dict(options)
        ts = None if save_at is None else np.asarray(save_at)

        def one(ctx: Context) -> SimulationResult:
            return simulate(deref(ref), ctx, t_final, integrator, save_at=ts, record=record, **kwargs)

        return jax.jit(jax.vmap(one))  # (the system is reached weakly: a dropped system is freed)

    return _RUNNERS.get(system, key, build)


def shard_batch(
    contexts: Context, mesh: Mesh, axis_name: str | None = None, process_local: bool = False
) -> tuple[Context, jax.Array, int]:
    """Pad a batched context to a multiple of the device count and shard its batch axis over ``mesh``.

    Returns (global batched context, mask of real members, number of members). With
    ``process_local=True`` each process passes its own slice (same size on every process); the slices
    form one global batch in process order. Inside a trace the sharding is a constraint.
    """
    axis = axis_name or mesh.axis_names[0]
    if axis not in mesh.axis_names:
        raise JaxsysError(
            f"shard_batch: axis_name={axis!r} is not an axis of the mesh; its axes are {tuple(mesh.axis_names)}."
        )
    devices = mesh.shape[axis]
    sharding = NamedSharding(mesh, PartitionSpec(axis))
    n_local = batch_size(contexts, "shard_batch")
    if process_local:
        n_proc = jax.process_count()
        local_devices = devices // n_proc
        per_process = -(-n_local // local_devices) * local_devices
        padded = _pad(contexts, per_process)

        def globalize(x: Any) -> jax.Array:
            return jax.make_array_from_process_local_data(sharding, np.asarray(x))

        batch = jax.tree_util.tree_map(globalize, padded)
        mask = globalize(np.arange(per_process) < n_local)
        return batch, mask, n_local * n_proc
    total = -(-n_local // devices) * devices
    padded = _pad(contexts, total)
    mask = jnp.arange(total) < n_local
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(padded)):
        return jax.lax.with_sharding_constraint(padded, sharding), mask, n_local
    return jax.device_put(padded, sharding), jax.device_put(mask, sharding), n_local


_CPU_SCHEDULER_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"


def _warn_cpu_scheduler(system: System, n: int) -> None:
    """Warn before a batch of ``n`` >= 4,096 members of a system with a MuJoCo plant runs on a CPU with
    XLA's concurrency-optimized scheduler on: XLA's CPU runtime hangs there (asleep, no CPU used), the
    raw ``vmap`` of ``mjx.step`` as well (measured: 2,048 box-on-plane members run, 4,096 hang)."""
    if n < 4096 or _CPU_SCHEDULER_FLAG in os.environ.get("XLA_FLAGS", "") or jax.default_backend() != "cpu":
        return
    if not any(type(leaf).__name__ == "MujocoPlant" for leaf in event_leaves(system)):
        return
    warnings.warn(
        f"batch_simulate: {n} members of a system with a MujocoPlant on a CPU: XLA's CPU runtime is known to "
        f"hang on MJX batches this large (from ~4,096 members; the raw jax.vmap of mjx.step too) unless its "
        f"concurrency-optimized scheduler is off. Start Python with XLA_FLAGS={_CPU_SCHEDULER_FLAG} (it must be "
        f"set before JAX starts), or run smaller batches.",
        RuntimeWarning,
        stacklevel=3,
    )


def batch_simulate(
    system: System,
    contexts: Context,
    t_final: float,
    integrator: IntegratorBase | None = None,
    save_at: Any = None,
    record: Callable[[Context], Any] | None = None,
    mesh: Mesh | None = None,
    axis_name: str | None = None,
    process_local: bool = False,
    **simulate_options: Any,
) -> BatchResult:
    """Simulate every member of the batched ``contexts`` to ``t_final`` (Drake's ``MonteCarloSimulation``,
    the JAX way).

    **Arguments:**
    - `contexts`: a batched context ([`stack_contexts`][jaxsys.stack_contexts],
      [`randomize_contexts`][jaxsys.randomize_contexts]).
    - `integrator`, `save_at`, `record`, `**simulate_options`: as for [`simulate`][jaxsys.simulate].
    - `mesh`, `axis_name`: shard the batch axis over this mesh axis (default: the mesh's first axis).
      None: one device, ``jit(vmap(simulate))``.
    - `process_local`: ``contexts`` holds only this process's slice of the batch (multi-process runs);
      the slices of all processes, in process order, form the batch.

    Returns a [`BatchResult`][jaxsys.BatchResult]. Works inside ``jax.grad`` (the sharding is then a
    constraint).

    **Precision.** Each member runs in the contexts' dtype: float32 batches (the usual choice on a GPU)
    deliver error-controlled accuracies down to ~1e-6 per member (a finer target warns, as for
    ``simulate``); statuses are per member, so one member that fails does not hide behind the others.

    **Errors.** With ``throw=True`` (default) a failed member raises ``simulate``'s error for it: at
    top level checked after the run, naming the first failing member (``batch_simulate: member k:
    ...``, an ``EquinoxRuntimeError``); under a transformation raised inside the program (naming no
    member). ``throw=False`` returns every member's status (and, at top level, returns without
    waiting for the run: the check after it waits).
    """
    system.validate_context(contexts)
    n_local = batch_size(contexts, "batch_simulate")
    _warn_cpu_scheduler(system, n_local)
    if mesh is not None and axis_name is not None and axis_name not in mesh.axis_names:
        raise JaxsysError(
            f"batch_simulate: axis_name={axis_name!r} is not an axis of the mesh; its axes are "
            f"{tuple(mesh.axis_names)}."
        )
    # A top-level call's statuses are checked after the run, here: the error names the failing member
    # and comes as a clean EquinoxRuntimeError (raised inside a jax.jit program, JAX wrapped it in a
    # runtime error with equinox's advice to use filter_jit), and the program holds no host callback,
    # so JAX's persistent compilation cache keeps it
    after = (
        simulate_options.get("throw", True) is True
        and not simulate_options.get("trajectory")
        and jax.process_count() == 1
        and simulate_module._top_level()
    )
    options = tuple(sorted(dict(simulate_options, throw=False).items() if after else simulate_options.items()))
    save = None if save_at is None else tuple(float(t) for t in np.asarray(save_at).reshape(-1))
    run = _runner(system, integrator, float(t_final), save, record, options)
    if mesh is None:
        if process_local and jax.process_count() > 1:
            raise JaxsysError("batch_simulate: process_local=True needs a mesh over all processes' devices.")
        result = BatchResult(run(contexts), jnp.ones((n_local,), bool), n_local)
    else:
        batch, mask, num = shard_batch(contexts, mesh, axis_name, process_local)
        result = BatchResult(run(batch), mask, num)
    if after:
        _raise_for_members(result, contexts.get_time().dtype, integrator)
    return result


def _raise_for_members(batch: BatchResult, dtype: Any, integrator: IntegratorBase | None) -> None:
    """``throw=True``'s error for the first member whose run failed, raised after a batch compiled
    without it (`batch_simulate`'s top-level calls)."""
    status = np.asarray(batch.result.status)[: batch.num_members]
    failed = np.flatnonzero(status != 0)
    if failed.size == 0:
        return
    k = int(failed[0])
    events = batch.result.event_status
    index = -1 if events is None else int(np.asarray(events)[k, 1])
    implicit = (integrator if integrator is not None else simulate_module._DEFAULT_INTEGRATOR).can_fail()
    message = simulate_module._failure_message(int(status[k]), index, batch.result.status_reasons, dtype, implicit)
    raise eqx.EquinoxRuntimeError(f"batch_simulate: member {k}: {message}")
