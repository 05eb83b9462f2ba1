"""Vectorised evaluation of identical leaves in a Diagram.

A diagram built from many copies of one block (a chain of lags, a bank of filters, N pendulums)
would otherwise be traced and compiled leaf by leaf: compile time and run time grow with N, and XLA
runs hundreds of tiny kernels per evaluation. Here, leaves that are structurally identical (same
code: one class, or classes whose attributes are the same functions and values, see
`class_signature`; same static configuration, same state/parameter/port layout, same calc
functions) form a *group*; the group's outputs that have no direct feedthrough and its time derivatives are computed
by one ``jax.vmap`` over the members' stacked contexts. Inputs of a group are gathered from a "bus":
the concatenation of every source array feeding that input, indexed by a static index vector.
Nothing changes semantically: the same leaf code runs on the same values.

Imports (within jaxsys): ``ports``.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .ports import abstract_signature


MIN_GROUP_SIZE = 4


def _value_sig(v: Any) -> Any:
    if isinstance(v, (jax.Array, np.ndarray)):
        return ("array", tuple(v.shape), str(v.dtype))
    try:
        hash(v)
    except TypeError:
        return ("id", id(v))
    return ("value", type(v), v)


def _callable_sig(fn: Any) -> Any:
    func = getattr(fn, "__func__", None)
    if func is not None:
        return ("method", func)
    if isinstance(fn, types.FunctionType):
        cells = ()
        if fn.__closure__:
            cells = tuple(_value_sig(c.cell_contents) for c in fn.__closure__)
        defaults = tuple(_value_sig(v) for v in (fn.__defaults__ or ()))
        kwdefaults = tuple((k, _value_sig(v)) for k, v in sorted((fn.__kwdefaults__ or {}).items()))
        if any(c[0] == "id" for c in cells + defaults + tuple(v for _, v in kwdefaults)):
            return ("id", id(fn))
        return ("function", fn.__code__, cells, defaults, kwdefaults, id(fn.__globals__))
    return ("id", id(fn))


_CLASS_SIGS: dict[type, Any] = {}


def _attribute_sig(value: Any) -> Any:
    if isinstance(value, (staticmethod, classmethod)):
        return (type(value).__name__, _callable_sig(value.__func__))
    if isinstance(value, property):
        return ("property", _callable_sig(value.fget), _callable_sig(value.fset), _callable_sig(value.fdel))
    if isinstance(value, types.FunctionType):
        return _callable_sig(value)
    return _value_sig(value)


_ATTRIBUTE_SIGS: dict[int, tuple[Any, Any]] = {}  # id(attribute) -> (attribute, signature or None)


def _cached_attribute_sig(value: Any) -> Any:
    """`_attribute_sig`, or None where it is identity-based; cached per attribute object
    (classes share most attributes through their bases)."""
    hit = _ATTRIBUTE_SIGS.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    sig = _attribute_sig(value)
    if _has_id(sig):
        sig = None
    if isinstance(value, (types.FunctionType, staticmethod, classmethod, property)):
        _ATTRIBUTE_SIGS[id(value)] = (value, sig)  # (holds the object: its id stays valid)
    return sig


def class_signature(cls: type) -> Any:
    """What a leaf's class contributes to its code: every attribute its MRO defines (dunder names
    and ``abc`` bookkeeping aside), looked up statically, as code + closure + defaults for functions
    and as values for the rest. Distinct classes with the same code (subclasses that only rename,
    classes made by a factory from the same functions) have equal signatures and so can be evaluated
    together; anything not comparable falls back to the class itself (cached per class)."""
    sig = _CLASS_SIGS.get(cls)
    if sig is None:
        found: dict[str, Any] = {}  # static lookup along the MRO: the first definition wins
        for k in reversed(cls.__mro__):
            found.update(_own_attribute_sigs(k))
        if any(a is None for a in found.values()):
            sig = ("class", cls)
        else:
            sig = ("code", tuple(sorted(found.items())))
        _CLASS_SIGS[cls] = sig
    return sig


_OWN_SIGS: dict[type, dict[str, Any]] = {}


def _own_attribute_sigs(k: type) -> dict[str, Any]:
    """The signatures of the attributes ``k`` itself defines (None where identity-based), cached per
    class: a leaf class shares its bases' entries, so only its own attributes are looked at."""
    own = _OWN_SIGS.get(k)
    if own is None:
        own = {}
        if k is not object:
            for n, v in vars(k).items():
                if not (n.startswith("__") and n.endswith("__")) and not n.startswith("_abc"):
                    own[n] = _cached_attribute_sig(v)
        _OWN_SIGS[k] = own
    return own


def _has_id(sig: Any) -> bool:
    return isinstance(sig, tuple) and bool(sig) and (sig[0] == "id" or any(_has_id(x) for x in sig[1:]))


def leaf_signature(leaf: Any, include_feedthrough: bool = True) -> Any:
    """A hashable description of everything static about a leaf; equal signatures -> same code."""
    spec = leaf._spec
    fields = []
    for f in dataclasses.fields(leaf):
        if f.name == "_spec":
            continue
        fields.append((f.name, _value_sig(getattr(leaf, f.name))))
    ports_in = tuple(
        (p.get_data_type(), p.size(), abstract_signature(p.get_model()) if p.is_abstract() else None)
        for p in spec.input_ports
    )
    ports_out = tuple(
        (p.get_data_type(), p.size(), abstract_signature(p.get_model()) if p.is_abstract() else None)
        for p in spec.output_ports
    )
    sig = (
        class_signature(type(leaf)),
        tuple(fields),
        (spec.num_q, spec.num_v, spec.num_z),
        tuple(d.shape for d in spec.discrete_defaults),
        tuple(abstract_signature(a) for a in spec.abstract_defaults),
        tuple(p.shape for p in spec.numeric_param_defaults),
        tuple(abstract_signature(a) for a in spec.abstract_param_defaults),
        ports_in,
        ports_out,
        tuple(_callable_sig(c) for c in spec.output_calcs),
        tuple(None if d is None else repr(d) for d in spec.output_feedthrough),
        leaf.get_direct_feedthroughs() if include_feedthrough else None,
    )
    if any(isinstance(x, tuple) and x and x[0] == "id" for x in sig[9]) or any(s[0] == "id" for _, s in fields):
        return ("unique", id(leaf))
    return sig


def find_groups(leaves: list[Any]) -> list[list[int]]:
    """Indices of leaves grouped by signature; only groups of at least MIN_GROUP_SIZE."""
    by_sig: dict[Any, list[int]] = {}
    for i, leaf in enumerate(leaves):
        try:
            sig = leaf_signature(leaf)
            hash(sig)
        except Exception:  # noqa: BLE001 - anything odd: do not vectorise this leaf
            continue
        by_sig.setdefault(sig, []).append(i)
    return [g for g in by_sig.values() if len(g) >= MIN_GROUP_SIZE]


def stack(trees: list[Any]) -> Any:
    """Stack pytrees of identical structure along a new leading axis."""
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *trees)
