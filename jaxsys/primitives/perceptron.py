"""A multilayer perceptron as a system (Drake's ``MultilayerPerceptron``), its weights in the context so a
network can be trained through a simulation with ``jax.grad``.

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
from ..framework.errors import DeclarationError, JaxsysError
from ..framework.leaf_system import LeafSystem


ACTIVATIONS = {"tanh": jnp.tanh, "relu": jax.nn.relu, "identity": lambda z: z}


class MultilayerPerceptron(LeafSystem):
    """y = W_L σ(… σ(W_1 x + b_1) …) + b_L (Drake's ``MultilayerPerceptron(layers, activation_type)``):
    ``layers`` = [input size, hidden sizes…, output size]; σ (``"tanh"``, ``"relu"`` or
    ``"identity"``) on every layer but the last, which is linear (Drake's convention).

    - Ports: input ``x`` (layers[0]), output ``y`` (layers[-1]).
    - Numeric parameter 0: all weights and biases, layer by layer (W_i row-major, shape
      (layers[i+1], layers[i]), then b_i); ``num_parameters()`` of them. Default values: equinox's
      ``eqx.nn.Linear`` initialization (uniform in ±1/sqrt(fan-in)) from ``jax.random.PRNGKey(seed)``,
      drawn in float32 so a seed gives the same network with and without x64.
    - ``get_weights`` / ``get_biases`` / ``set_weights`` / ``set_biases`` / ``get_parameters`` /
      ``set_parameters`` / ``set_random_parameters`` read and write them in a context (the setters
      return a new context).
    """

    layer_sizes: tuple[int, ...] = eqx.field(static=True)
    activation: str = eqx.field(static=True)

    def __init__(self, layers: Sequence[int], activation_type: str = "tanh", seed: int = 0, name: str = "") -> None:
        super().__init__(name)
        sizes = tuple(int(s) for s in layers)
        if len(sizes) < 2 or any(s < 1 for s in sizes):
            raise DeclarationError(
                f"MultilayerPerceptron {name!r}: layers must list at least an input and an output size, all "
                f"positive; got {list(layers)}."
            )
        if activation_type not in ACTIVATIONS:
            raise DeclarationError(
                f"MultilayerPerceptron {name!r}: activation_type must be one of {sorted(ACTIVATIONS)}; got "
                f"{activation_type!r}."
            )
        self.layer_sizes, self.activation = sizes, activation_type
        self.declare_numeric_parameter(np.asarray(self._random(jax.random.PRNGKey(seed)), float))
        self.declare_vector_input_port("x", sizes[0])
        self.declare_vector_output_port("y", sizes[-1], self.calc_y)

    def _random(self, key: Any) -> jax.Array:
        parts = []
        for k, (n_in, n_out) in zip(jax.random.split(key, len(self.layer_sizes) - 1), self._shapes()):
            # drawn in float32 whatever the x64 setting: the same seed gives the same network
            lin = eqx.nn.Linear(n_in, n_out, key=k, dtype=jnp.float32)
            assert lin.bias is not None  # (use_bias, the default)
            parts += [lin.weight.ravel(), lin.bias.ravel()]
        return jnp.concatenate(parts)

    def _shapes(self) -> list[tuple[int, int]]:
        return list(zip(self.layer_sizes[:-1], self.layer_sizes[1:]))

    def _offsets(self) -> list[tuple[int, int, int]]:
        out, k = [], 0
        for n_in, n_out in self._shapes():
            out.append((k, k + n_in * n_out, k + n_in * n_out + n_out))
            k += n_in * n_out + n_out
        return out

    def num_parameters(self) -> int:
        """The number of weights and biases (Drake's ``num_parameters``)."""
        return self._offsets()[-1][2]

    def layers(self) -> tuple[int, ...]:
        """The layer sizes (Drake's ``layers``)."""
        return self.layer_sizes

    def activation_type(self) -> str:
        """The hidden layers' activation (Drake's ``activation_type``)."""
        return self.activation

    def _layer(self, layer: int) -> tuple[int, int, int, int, int]:
        if not 0 <= layer < len(self.layer_sizes) - 1:
            raise JaxsysError(
                f"MultilayerPerceptron {self.get_system_id_string()}: layer must be in [0, "
                f"{len(self.layer_sizes) - 1}); got {layer}."
            )
        n_in, n_out = self._shapes()[layer]
        return (*self._offsets()[layer], n_in, n_out)

    def get_parameters(self, context: Context) -> jax.Array:
        """All parameters, (num_parameters,)."""
        return context.get_numeric_parameter(0)

    def set_parameters(self, context: Context, params: Any) -> Context:
        """``context`` with all parameters replaced."""
        return context.with_numeric_parameter(0, jnp.asarray(params))

    def get_weights(self, context: Context, layer: int) -> jax.Array:
        """W of ``layer`` (0-based), shape (layers[layer+1], layers[layer])."""
        a, b, _, n_in, n_out = self._layer(layer)
        return self.get_parameters(context)[a:b].reshape(n_out, n_in)

    def get_biases(self, context: Context, layer: int) -> jax.Array:
        """b of ``layer``, shape (layers[layer+1],)."""
        _, b, c, _, _ = self._layer(layer)
        return self.get_parameters(context)[b:c]

    def set_weights(self, context: Context, layer: int, W: Any) -> Context:
        """``context`` with W of ``layer`` replaced (a named error for a wrong shape)."""
        a, b, _, n_in, n_out = self._layer(layer)
        if np.shape(W) != (n_out, n_in):
            raise JaxsysError(
                f"MultilayerPerceptron.set_weights: layer {layer} has W of shape {(n_out, n_in)}; got {np.shape(W)}."
            )
        p = self.get_parameters(context)
        return self.set_parameters(context, p.at[a:b].set(jnp.asarray(W, p.dtype).ravel()))

    def set_biases(self, context: Context, layer: int, bias: Any) -> Context:
        """``context`` with b of ``layer`` replaced."""
        _, b, c, _, n_out = self._layer(layer)
        if np.shape(bias) != (n_out,):
            raise JaxsysError(
                f"MultilayerPerceptron.set_biases: layer {layer} has b of shape {(n_out,)}; got {np.shape(bias)}."
            )
        p = self.get_parameters(context)
        return self.set_parameters(context, p.at[b:c].set(jnp.asarray(bias, p.dtype)))

    def set_random_parameters(self, context: Context, key: Any) -> Context:
        """``context`` with freshly initialized parameters from the PRNG ``key`` (an int seed or a key)."""
        if isinstance(key, int):
            key = jax.random.PRNGKey(key)
        p = self.get_parameters(context)
        return self.set_parameters(context, self._random(key).astype(p.dtype))

    def forward(self, params: jax.Array, x: jax.Array) -> jax.Array:
        """The network on ``x`` with the flat ``params`` (usable outside a simulation)."""
        sigma = ACTIVATIONS[self.activation]
        h = x
        last = len(self.layer_sizes) - 2
        for i, ((a, b, c), (n_in, n_out)) in enumerate(zip(self._offsets(), self._shapes())):
            h = params[a:b].reshape(n_out, n_in) @ h + params[b:c]
            if i < last:
                h = sigma(h)
        return h

    def calc_y(self, context: Context) -> jax.Array:
        """The network's output for the input ``x``."""
        return self.forward(self.get_parameters(context), self.get_input_port(0).eval(context))


__all__ = ["MultilayerPerceptron"]
