"""One cache mechanism for what is built per system: compiled runs, advances, batch runners, fits.

Every compiled program jaxsys keeps between calls (``simulate``'s compiled entries, the
``Simulator``'s advances, ``batch_simulate``'s runners, ``fit_parameters``' steps) lives in a
`SystemCache`: bounded (least recently used goes first) and keyed *weakly* on the system, so a
system the user drops is freed with its compiled programs. The functions a cache builds must not hold
the system strongly: the builder receives a ``weakref.ref`` to it and dereferences it when tracing.

Imports: the standard library (and JAX, when clearing its caches).
"""

from __future__ import annotations

import sys
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar


V = TypeVar("V")

_ALL: list[weakref.ref[SystemCache[Any]]] = []


class SystemCache(Generic[V]):
    """Values built per ``(system, key)``, at most ``maxsize`` of them, the system held weakly.

    ``get(system, key, build)`` returns the cached value or ``build(system_ref)`` (``system_ref`` a
    ``weakref.ref``: the value must reach the system through it, never hold it). When the system is
    garbage collected every entry of it is dropped, so its compiled programs go with it; past
    ``maxsize`` entries the least recently used goes.
    """

    def __init__(self, name: str, maxsize: int = 64) -> None:
        self.name = name
        self.maxsize = maxsize
        self._entries: OrderedDict[tuple[int, Hashable], tuple[weakref.ref[Any], V]] = OrderedDict()
        self._refs: dict[int, weakref.ref[Any]] = {}  # id(system) -> the one weak reference watching it
        _ALL.append(weakref.ref(self))

    def __len__(self) -> int:
        return len(self._entries)

    def _ref(self, system: Any) -> weakref.ref[Any]:
        sid = id(system)
        ref = self._refs.get(sid)
        if ref is not None and ref() is system:
            return ref
        this = weakref.ref(self)

        def forget(dead: weakref.ref[Any], sid: int = sid) -> None:
            cache = this()
            if cache is None or sys.is_finalizing() or cache._refs.get(sid) is not dead:
                return
            del cache._refs[sid]
            for k in [k for k, (r, _) in cache._entries.items() if r is dead]:
                cache._entries.pop(k, None)

        ref = weakref.ref(system, forget)
        self._refs[sid] = ref
        return ref

    def get(self, system: Any, key: Hashable, build: Callable[[weakref.ref[Any]], V]) -> V:
        """The value for ``(system, key)``, built by ``build(weakref.ref(system))`` when missing."""
        full = (id(system), key)
        entry = self._entries.get(full)
        if entry is not None and entry[0]() is system:
            self._entries.move_to_end(full)
            return entry[1]
        ref = self._ref(system)
        value = build(ref)
        self._entries[full] = (ref, value)
        while len(self._entries) > self.maxsize:
            old_key, (old_ref, _) = self._entries.popitem(last=False)
            if not any(r is old_ref for r, _ in self._entries.values()):
                self._refs.pop(old_key[0], None)
        return value

    def peek(self, system: Any, key: Hashable) -> V | None:
        """The value for ``(system, key)``, or None when there is none (nothing is built)."""
        full = (id(system), key)
        entry = self._entries.get(full)
        if entry is not None and entry[0]() is system:
            self._entries.move_to_end(full)
            return entry[1]
        return None

    def put(self, system: Any, key: Hashable, value: V) -> None:
        """Keep ``value`` for ``(system, key)`` (it must not hold the system strongly)."""
        self.get(system, key, lambda ref: value)

    def clear(self) -> None:
        """Drop every entry (and so every compiled program held here)."""
        self._entries.clear()
        self._refs.clear()


def clear_caches(jax_caches: bool = True) -> None:
    """Drop every compiled program held between calls: jaxsys's (each `SystemCache`) and, with
    ``jax_caches``, JAX's own (``jax.clear_caches()``).

    jaxsys frees a system's compiled programs when the system is garbage collected. JAX itself keeps
    the traces and executables of recent programs in least-recently-used caches of up to 2,048 entries
    each, whether or not their functions are still alive (about 3 MiB per small simulated system on a
    CPU): a sweep over thousands of distinct systems grows until those caches are full. Call this
    between batches of such a sweep (``benchmarks/memory_sweep.py`` measures both ways); later calls
    then compile again.
    """
    for r in list(_ALL):
        cache = r()
        if cache is not None:
            cache.clear()
    if jax_caches:
        import jax

        jax.clear_caches()


def cache_sizes() -> dict[str, int]:
    """The number of entries of each `SystemCache`, by name (for tests and diagnostics)."""
    out: dict[str, int] = {}
    for r in _ALL:
        cache = r()
        if cache is not None:
            out[cache.name] = out.get(cache.name, 0) + len(cache)
    return out


def hashable_key(value: Any) -> Hashable:
    """``value`` itself where it can be part of a cache key (hashable), else its identity. A value
    that is kept by the cached program (a cost function, an optimizer) may be keyed by identity
    safely: it stays alive with the entry, so its id is not reused."""
    try:
        hash(value)
        return value
    except TypeError:
        return ("id", id(value))


def deref(ref: weakref.ref[Any]) -> Any:
    """The system behind ``ref`` (a cache entry is dropped before its system dies, so it is alive)."""
    system = ref()
    if system is None:  # pragma: no cover - the entry would have been dropped with it
        raise RuntimeError("jaxsys: a cached program outlived its system")
    return system
