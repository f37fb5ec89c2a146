"""The predicate ops by their names in the spec: ops register here, specs and joins look them up."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from windjoin.operators.predicate_ops.base import PredicateOp

REGISTRY: dict[str, PredicateOp] = {}  # by name, in registration order


def register(cls: type[PredicateOp]) -> type[PredicateOp]:
    """Class decorator: make the op available to specs under `cls.name`."""
    if cls.name in REGISTRY:
        raise ValueError(f"predicate op {cls.name!r} is registered twice")
    REGISTRY[cls.name] = cls()
    return cls


def op_named(name: str) -> PredicateOp:
    """The registered op of this name (the spec has checked it exists)."""
    return REGISTRY[name]


def op_names() -> list[str]:
    """Registered op names, in registration order."""
    return list(REGISTRY)
