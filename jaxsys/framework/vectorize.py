"""Vectorised evaluation of identical leaves in a Diagram.

A diagram built from many copies of one block (a chain of lags, a bank of filters, N pendulums)
would otherwise be traced and compiled leaf by leaf: compile time and run time grow with N, and XLA
runs hundreds of tiny kernels per evaluation. Here, leaves that are structurally identical (same
class, same static configuration, same state/parameter/port layout, same calc functions) form a
*group*; the group's outputs that have no direct feedthrough and its time derivatives are computed
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
        if any(c[0] == "id" for c in cells):
            return ("id", id(fn))
        return ("function", fn.__code__, cells)
    return ("id", id(fn))


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
        type(leaf),
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
