"""Errors that translate Drake's CamelCase names to jaxsys's: a pydrake habit such as
``context.SetContinuousState(x)`` gets an error naming ``with_continuous_state`` (and the idiom), not
a bare ``AttributeError``.

Imports: nothing from jaxsys.
"""

from __future__ import annotations

import re
from typing import Any


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _candidates(snake: str) -> list[str]:
    out = [snake]
    for drake, ours in (
        ("get_my_mutable_context_from_root", "get_my_context_from_root"),
        ("get_mutable_", "get_"),
        ("get_mutable_", "with_"),
        ("set_", "with_"),
        ("set_from_vector", "with_vector"),
        ("eval", "eval"),
    ):
        if snake.startswith(drake):
            out.append(ours + snake[len(drake) :])
    return out


def drake_name_error(obj: Any, name: str) -> AttributeError:
    """The AttributeError for ``obj.name``: for a CamelCase name (Drake's spelling) it names the jaxsys
    method that does the job, with the idiom where contexts are values."""
    cls = type(obj).__name__
    plain = AttributeError(f"{cls!r} object has no attribute {name!r}")
    drake_snake = name.startswith(("get_mutable_", "set_"))  # pydrake's snake_case setters
    if not drake_snake and (not name or name[0] == "_" or not name[0].isupper() or not any(c.islower() for c in name)):
        return plain
    snake = _snake(name)
    if snake.startswith("get_mutable_") and hasattr(type(obj), "with_" + snake[12:]):
        rest = snake[12:]
        return AttributeError(
            f"{cls!r} object has no attribute {name!r}: contexts are values in jaxsys. Read with "
            f"`get_{rest}`; change with `context = context.with_{rest}(...)` (returns a new context)."
        )
    for cand in _candidates(snake):
        if hasattr(type(obj), cand):
            idiom = ""
            if cand.startswith("with_") and not snake.startswith("with_"):
                idiom = (
                    f" Contexts are values: {cand} returns a new one, so write `context = context.{cand}(...)` "
                    f"(a Simulator's: `simulator.get_mutable_context().{cand}(...)` writes it back)."
                )
            return AttributeError(
                f"{cls!r} object has no attribute {name!r}: jaxsys spells Drake's {name} as `{cand}`.{idiom}"
            )
    if drake_snake:
        return plain
    return AttributeError(
        f"{cls!r} object has no attribute {name!r} (jaxsys spells Drake's names in snake_case; {cls} has no "
        f"{snake!r} either: see the Drake name -> jaxsys name table in the README)."
    )


__all__ = ["drake_name_error"]
