"""Progress meters for long simulations (host callbacks from inside the compiled loop).

``simulate(..., progress_meter=TqdmProgressMeter())`` shows a tqdm bar of simulated time; the
default :class:`NoProgressMeter` adds nothing to the loop. The meter is updated every
``refresh_steps`` steps through ``jax.debug.callback``, so it works under ``jit``, ``vmap`` and
``grad`` (callbacks do not affect derivatives). Under ``vmap`` (``batch_simulate`` included) the
callbacks are not batched: a custom batching rule reduces the batch first (the least advanced
member's time and step count), so a batch has one bar, refreshed every ``refresh_steps`` steps of its
least advanced member, and compiles as one call whatever the batch size.

Imports: nothing from jaxsys.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np


_bars: dict[int, Any] = {}


def _batch_reduced(fn: Any, reducers: tuple[Any, ...]) -> Any:
    """``fn(*args)`` (side effects only) as a function whose batching rule reduces each batched
    argument with its reducer (e.g. ``jnp.min``) and calls ``fn`` once, so that under ``vmap`` a host
    callback runs once per step for the whole batch, not once per member. Arguments are cut from
    differentiation (a progress display has no derivative)."""

    @jax.custom_batching.custom_vmap
    def call(*args: Any) -> Any:
        fn(*args)
        return jnp.zeros((), jnp.int32)

    @call.def_vmap
    def rule(axis_size: int, in_batched: Any, *args: Any) -> Any:
        reduced = [r(a) if b else a for r, a, b in zip(reducers, args, in_batched)]
        return call(*reduced), False

    def wrapped(*args: Any) -> None:
        call(*(jax.lax.stop_gradient(a) for a in args))

    return wrapped


_lock = threading.Lock()
_ids = itertools.count()


class AbstractProgressMeter(eqx.Module):
    """Base class: ``start(t0, t_final)`` before the loop, ``update(t, step)`` in it, ``close(t)`` after."""

    def start(self, t0: jax.Array, t_final: jax.Array) -> Any:
        """Called before the loop; returns a token threaded to ``update`` and ``close``."""
        return None

    def update(self, token: Any, t: jax.Array, step: jax.Array) -> None:
        """Called every step inside the loop (implementations throttle themselves)."""

    def close(self, token: Any, t: jax.Array) -> None:
        """Called after the loop with the final time."""


class NoProgressMeter(AbstractProgressMeter):
    """No progress display (the default; costs nothing)."""


class TqdmProgressMeter(AbstractProgressMeter):
    """A tqdm bar of simulated time, refreshed every ``refresh_steps`` steps (needs ``tqdm``)."""

    refresh_steps: int = eqx.field(static=True, default=200)

    def start(self, t0: jax.Array, t_final: jax.Array) -> Any:
        try:
            import tqdm  # noqa: F401
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("TqdmProgressMeter needs tqdm: pip install tqdm") from e
        key = next(_ids)

        def _start(t0_: Any, tf_: Any) -> None:
            import tqdm

            with _lock:
                old = _bars.pop(key, None)
                if old is not None:
                    old.close()
                total = float(np.max(tf_) - np.min(t0_))
                _bars[key] = tqdm.tqdm(total=total, unit="s(sim)", bar_format="{l_bar}{bar}| {n:.3g}/{total:.3g} s")
                _bars[key].t0 = float(np.min(t0_))

        _batch_reduced(lambda a, b: jax.debug.callback(_start, a, b), (jnp.min, jnp.max))(t0, t_final)
        return key

    def update(self, token: Any, t: jax.Array, step: jax.Array) -> None:
        def _update(t_: Any) -> None:
            with _lock:
                bar = _bars.get(token)
                if bar is not None:
                    bar.n = float(np.min(t_)) - bar.t0
                    bar.refresh()

        def throttled(t_: Any, step_: Any) -> None:
            jax.lax.cond(step_ % self.refresh_steps == 0, lambda: jax.debug.callback(_update, t_), lambda: None)

        _batch_reduced(throttled, (jnp.min, jnp.min))(t, step)

    def close(self, token: Any, t: jax.Array) -> None:
        def _close(t_: Any) -> None:
            with _lock:
                bar = _bars.pop(token, None)
                if bar is not None:
                    bar.n = float(np.min(t_)) - bar.t0
                    bar.refresh()
                    bar.close()

        _batch_reduced(lambda a: jax.debug.callback(_close, a), (jnp.min,))(t)


__all__ = ["AbstractProgressMeter", "NoProgressMeter", "TqdmProgressMeter"]
