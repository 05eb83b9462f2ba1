"""Finding direct feedthrough by tracing (instead of Drake's "assume yes").

An output port has direct feedthrough from an input port when its value depends on that input at
the same instant. Drake assumes every output depends on every input unless told otherwise, which
reports false algebraic loops. jaxsys traces the output's calc function to a jaxpr, with the input
values as jaxpr inputs, and follows data dependencies from the jaxpr's outputs back to its inputs.
Nested jaxprs (``cond``, ``scan``, ``pjit``, ...) are treated conservatively: every output of such an
equation depends on every input of it. If tracing fails (for example Python control flow on an input
value), every input is assumed to feed through, as in Drake.

Imports: nothing from jaxsys.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax.extend import core as jex_core


def jaxpr_dependencies(fn: Callable[..., Any], args: Sequence[Any]) -> list[bool] | None:
    """For each positional argument of ``fn``, whether ``fn(*args)``'s output depends on it.

    Returns None if ``fn`` cannot be traced with abstract values.
    """
    flat_args, in_tree = jax.tree_util.tree_flatten(tuple(args))
    arg_of_leaf: list[int] = []
    for i, a in enumerate(args):
        arg_of_leaf.extend([i] * len(jax.tree_util.tree_leaves(a)))

    def flat_fn(*leaves: Any) -> Any:
        return fn(*jax.tree_util.tree_unflatten(in_tree, leaves))

    try:
        closed = jax.make_jaxpr(flat_fn)(*flat_args)
    except Exception:  # noqa: BLE001 - any failure means "cannot tell": be conservative
        return None
    jaxpr = closed.jaxpr
    deps: dict[Any, frozenset[int]] = {}
    for v, i in zip(jaxpr.invars, arg_of_leaf):
        deps[v] = frozenset({i})

    def of(atom: Any) -> frozenset[int]:
        if isinstance(atom, jex_core.Literal):
            return frozenset()
        return deps.get(atom, frozenset())

    for eqn in jaxpr.eqns:
        d: frozenset[int] = frozenset()
        for a in eqn.invars:
            d = d | of(a)
        for o in eqn.outvars:
            deps[o] = d
    used: frozenset[int] = frozenset()
    for o in jaxpr.outvars:
        used = used | of(o)
    return [i in used for i in range(len(args))]
