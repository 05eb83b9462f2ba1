"""Progress meters for long simulations (host callbacks from inside the compiled loop).

``simulate(..., progress_meter=TqdmProgressMeter())`` shows a tqdm bar of simulated time; the
default :class:`NoProgressMeter` adds nothing to the loop. The meter is updated every
``refresh_steps`` steps through ``jax.debug.callback``, so it works under ``jit``, ``vmap`` (it
shows the least advanced batch member) and ``grad`` (callbacks do not affect derivatives).

Imports: nothing from jaxsys.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import equinox as eqx
import jax
import numpy as np


_bars: dict[int, Any] = {}
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

        jax.debug.callback(_start, t0, t_final)
        return key

    def update(self, token: Any, t: jax.Array, step: jax.Array) -> None:
        def _update(t_: Any) -> None:
            with _lock:
                bar = _bars.get(token)
                if bar is not None:
                    bar.n = float(np.min(t_)) - bar.t0
                    bar.refresh()

        jax.lax.cond(
            step % self.refresh_steps == 0,
            lambda: jax.debug.callback(_update, t),
            lambda: None,
        )

    def close(self, token: Any, t: jax.Array) -> None:
        def _close(t_: Any) -> None:
            with _lock:
                bar = _bars.pop(token, None)
                if bar is not None:
                    bar.n = float(np.min(t_)) - bar.t0
                    bar.refresh()
                    bar.close()

        jax.debug.callback(_close, t)


__all__ = ["AbstractProgressMeter", "NoProgressMeter", "TqdmProgressMeter"]
