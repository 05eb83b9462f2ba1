"""Signal routing and lookup blocks: Drake's ``Selector``, ``SparseMatrixGain`` and
``BarycentricMeshSystem``.

Imports (within jaxsys): the framework's ``context``, ``errors``, ``leaf_system``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context
from ..framework.errors import DeclarationError
from ..framework.leaf_system import LeafSystem


class Selector(LeafSystem):
    """Routes elements of its inputs to its outputs (Drake's ``Selector`` with its ``SelectorParams``).

    ``input_sizes``: the size of each input port (``u0``, ``u1``, ...); ``outputs``: for each output port
    (``y0``, ``y1``, ...) the list of ``(input_port, element)`` pairs it is made of, in order. An input
    element may feed several outputs or none.
    """

    selections: tuple[tuple[tuple[int, int], ...], ...] = eqx.field(static=True)

    def __init__(
        self, input_sizes: Sequence[int], outputs: Sequence[Sequence[tuple[int, int]]], name: str = ""
    ) -> None:
        super().__init__(name)
        sizes = [int(s) for s in input_sizes]
        for i, size in enumerate(sizes):
            self.declare_vector_input_port(f"u{i}", size)
        sel = []
        for j, picks in enumerate(outputs):
            picks = tuple((int(a), int(b)) for a, b in picks)
            for a, b in picks:
                if not (0 <= a < len(sizes) and 0 <= b < sizes[a]):
                    raise DeclarationError(
                        f"Selector {name!r}: output {j} selects element {b} of input {a}; the inputs have sizes "
                        f"{sizes}."
                    )
            sel.append(picks)

            def select(c: Context, j: int = j) -> Any:
                return self._select(c, j)

            self.declare_vector_output_port(f"y{j}", len(picks), select)
        self.selections = tuple(sel)

    def _select(self, context: Context, j: int) -> jax.Array:
        inputs = {a: self.get_input_port(a).eval(context) for a in {a for a, _ in self.selections[j]}}
        return jnp.stack([inputs[a][b] for a, b in self.selections[j]])


class SparseMatrixGain(LeafSystem):
    """y = D u with a sparse D (Drake's ``SparseMatrixGain``): given as a SciPy sparse matrix, a dense
    array, or ``(rows, cols, values, shape)``. Only the nonzeros are stored and multiplied (a
    segment-sum), and their values are numeric parameter 0 (differentiable). Ports ``u``, ``y``."""

    rows: tuple[int, ...] = eqx.field(static=True)
    cols: tuple[int, ...] = eqx.field(static=True)
    shape: tuple[int, int] = eqx.field(static=True)

    def __init__(self, D: Any, name: str = "") -> None:
        super().__init__(name)
        if isinstance(D, tuple) and len(D) == 4:
            rows, cols, vals, shape = D
            rows, cols, vals = np.asarray(rows, int), np.asarray(cols, int), np.asarray(vals, float)
        elif hasattr(D, "tocoo"):
            coo = D.tocoo()
            rows, cols, vals, shape = coo.row, coo.col, coo.data.astype(float), coo.shape
        else:
            dense = np.atleast_2d(np.asarray(D, float))
            rows, cols = np.nonzero(dense)
            vals, shape = dense[rows, cols], dense.shape
        shape = (int(shape[0]), int(shape[1]))
        if rows.size and (rows.min() < 0 or rows.max() >= shape[0] or cols.min() < 0 or cols.max() >= shape[1]):
            raise DeclarationError(f"SparseMatrixGain {name!r}: an entry lies outside the {shape} matrix.")
        self.rows, self.cols, self.shape = tuple(int(r) for r in rows), tuple(int(c) for c in cols), shape
        self.declare_numeric_parameter(vals if vals.size else np.zeros(0))
        self.declare_vector_input_port("u", shape[1])
        self.declare_vector_output_port("y", shape[0], self.calc_y)

    def calc_y(self, context: Context) -> jax.Array:
        """D u."""
        u = self.get_input_port(0).eval(context)
        vals = context.get_numeric_parameter(0)
        if not self.rows:
            return jnp.zeros((self.shape[0],), u.dtype)
        prod = vals * u[jnp.asarray(self.cols)]
        return jax.ops.segment_sum(prod, jnp.asarray(self.rows), num_segments=self.shape[0])


class BarycentricMeshSystem(LeafSystem):
    """A lookup table over a grid, interpolated barycentrically (Drake's ``BarycentricMeshSystem`` with a
    ``BarycentricMesh``): the grid cell containing the input is split into simplices (Kuhn's
    triangulation, as Drake's mesh), and the output interpolates ``output_values`` at the simplex's
    vertices; inputs outside the grid are clamped to it. Exact for affine functions.

    ``grid``: one increasing sequence of coordinates per input dimension; ``output_values``: shape
    (num_outputs, num_mesh_points), mesh point k = (i0, i1, ...) with k = i0 + n0 (i1 + n1 (...)) (the
    first dimension fastest, Drake's order). Values are numeric parameter 0 (flattened row-major,
    trainable). Ports ``u0`` (the point), ``y0``.
    """

    grid: tuple[tuple[float, ...], ...] = eqx.field(static=True)
    num_outputs: int = eqx.field(static=True)

    def __init__(self, grid: Sequence[Sequence[float]], output_values: Any, name: str = "") -> None:
        super().__init__(name)
        g = tuple(tuple(float(v) for v in sorted(set(axis))) for axis in grid)
        if not g or any(len(axis) < 1 for axis in g):
            raise DeclarationError(f"BarycentricMeshSystem {name!r}: every grid dimension needs at least one point.")
        values = np.atleast_2d(np.asarray(output_values, float))
        npts = int(np.prod([len(axis) for axis in g]))
        if values.shape[1] != npts:
            raise DeclarationError(
                f"BarycentricMeshSystem {name!r}: output_values must have one column per mesh point ({npts}); "
                f"got shape {values.shape}."
            )
        self.grid, self.num_outputs = g, values.shape[0]
        self.declare_numeric_parameter(values.ravel())
        self.declare_vector_input_port("u0", len(g))
        self.declare_vector_output_port("y0", self.num_outputs, self.calc_y)

    def calc_y(self, context: Context) -> jax.Array:
        """The interpolated value at the input."""
        x = self.get_input_port(0).eval(context)
        values = context.get_numeric_parameter(0).reshape(self.num_outputs, -1)
        d = len(self.grid)
        lows, fracs, strides, stride = [], [], [], 1
        for i, axis in enumerate(self.grid):
            a = jnp.asarray(axis, x.dtype)
            if len(axis) == 1:
                lows.append(jnp.zeros((), jnp.int32))
                fracs.append(jnp.zeros((), x.dtype))
            else:
                xi = jnp.clip(x[i], a[0], a[-1])
                k = jnp.clip(jnp.searchsorted(a, xi, side="right") - 1, 0, len(axis) - 2)
                lows.append(k)
                fracs.append((xi - a[k]) / (a[k + 1] - a[k]))
            strides.append(stride)
            stride *= len(axis)
        fr = jnp.stack(fracs)
        order = jnp.argsort(-fr)  # dimensions by decreasing fraction
        sorted_fr = fr[order]
        base = sum(lows[i] * strides[i] for i in range(d))
        step = jnp.asarray(strides)[order] * (jnp.asarray([len(a) for a in self.grid])[order] > 1)
        vertices = base + jnp.concatenate([jnp.zeros((1,), step.dtype), jnp.cumsum(step)])
        weights = jnp.concatenate([1.0 - sorted_fr[:1], sorted_fr[:-1] - sorted_fr[1:], sorted_fr[-1:]])
        return values[:, vertices] @ weights


__all__ = ["BarycentricMeshSystem", "Selector", "SparseMatrixGain"]
