"""Logging a vector signal during a simulation (Drake's ``VectorLogSink`` / ``LogVectorOutput``)."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import numpy as np

from ..framework.context import Context
from ..framework.leaf_system import LeafSystem


class VectorLog:
    """A recorded signal (Drake's ``VectorLog``): ``sample_times()`` (N,) and ``data()`` (size, N)."""

    def __init__(self, times: Any, data: Any) -> None:
        self._times = np.asarray(times)
        self._data = np.asarray(data)

    def sample_times(self) -> np.ndarray:
        """The publish times, s (Drake: ``sample_times``)."""
        return self._times

    def data(self) -> np.ndarray:
        """The values, one column per sample: shape (size, N) (Drake: ``data``)."""
        return self._data.T

    def num_samples(self) -> int:
        """Drake: ``num_samples``."""
        return int(self._times.shape[0])


class VectorLogSink(LeafSystem):
    """Records its vector input at every ``publish_period`` s, or at every step when the period is
    0 (Drake's ``VectorLogSink``). The record is in the SimulationResult: use `find_log`.

    Port ``data`` (size ``input_size``).
    """

    log_event: Any = eqx.field(static=True)

    def __init__(self, input_size: int, publish_period: float = 0.0, name: str = "") -> None:
        super().__init__(name)
        self.declare_vector_input_port("data", input_size)
        if publish_period > 0:
            event = self.declare_periodic_publish_event(publish_period, 0.0, self._record, name="log")
        else:
            event = self.declare_per_step_publish_event(self._record, name="log")
        self.log_event = event

    def _record(self, context: Context) -> Any:
        return self.get_input_port(0).eval(context)

    def find_log(self, result: Any) -> VectorLog:
        """The log of this sink in a (concrete, unbatched) simulation result, or in a
        [`Simulator`][jaxsys.Simulator] (every sample since its start, across ``advance_to`` calls)
        (Drake: ``FindLog``)."""
        log = result.get_publish_log(self.log_event)
        return VectorLog(log.sample_times(), log.data())

    def find_log_arrays(self, result: Any) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(times buffer, values buffer, count): the log as arrays, usable inside ``jit``/``vmap``."""
        log = result.get_publish_log(self.log_event)
        return log.times, log.values, log.count


def log_vector_output(src: Any, builder: Any, publish_period: float = 0.0) -> VectorLogSink:
    """Add a VectorLogSink fed by output port ``src`` to ``builder`` (Drake: ``LogVectorOutput``)."""
    sink = builder.add_system(VectorLogSink(src.size(), publish_period))
    builder.connect(src, sink.get_input_port(0))
    return sink
