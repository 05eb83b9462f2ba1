"""Exceptions raised by jaxsys.

Every error jaxsys raises at build or trace time is a subclass of [`JaxsysError`][jaxsys.JaxsysError], and its
message names the system (by its path in the diagram, e.g. ``::diagram::plant``), the port or state
involved, what was expected and what was given.

Imports: nothing from jaxsys.
"""

from __future__ import annotations

import jax


class JaxsysError(Exception):
    """Base class of every error raised by jaxsys."""


class SystemMismatchError(JaxsysError, ValueError):
    """An object (Context, State, Parameters, output, ...) was created for another System.

    Mirrors Drake's ``ValidateCreatedForThisSystem`` failure (see Drake's "System Compatibility").
    """


class PortError(JaxsysError, ValueError):
    """A port was misused: wrong size or type, unknown name, not connected, ..."""


class InputPortNotConnectedError(PortError):
    """An input port was evaluated that is neither connected nor fixed (Drake: "is not connected")."""


class StateError(JaxsysError, ValueError):
    """A state or parameter value of the wrong size, dtype or structure was given."""


class DiagramBuildError(JaxsysError, ValueError):
    """A DiagramBuilder was used wrongly (duplicate names, double connections, foreign ports, ...)."""


class AlgebraicLoopError(DiagramBuildError):
    """A cycle through direct-feedthrough paths was found when building a Diagram."""


class ConstraintError(JaxsysError, ValueError):
    """A system constraint is violated or was declared wrongly."""


class DeclarationError(JaxsysError, ValueError):
    """A ``declare_*`` call was given bad arguments."""


class MissingOverrideError(JaxsysError, NotImplementedError):
    """A system declared something (e.g. continuous state) without overriding the method computing it."""


class _Raise:
    """An input whose source could not be evaluated (e.g. unconnected): raises only if read."""

    def __init__(self, error: Exception) -> None:
        self.error = error


jax.tree_util.register_pytree_node(_Raise, lambda x: ((), x), lambda aux, _: aux)
