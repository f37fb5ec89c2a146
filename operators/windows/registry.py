"""The window kinds by their `kind` tag: kinds register here, the spec builds its `window` key from them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from windjoin.operators.windows.base import WindowKind

KINDS: dict[str, type[WindowKind]] = {}  # by tag, in registration order


def register(cls: type[WindowKind]) -> type[WindowKind]:
    """Class decorator: make the kind available to specs under its `kind` tag."""
    tag = cls.model_fields["kind"].annotation.__args__[0]  # Literal["tag"]
    if tag in KINDS:
        raise ValueError(f"window kind {tag!r} is registered twice")
    KINDS[tag] = cls
    return cls


def kind_names() -> list[str]:
    return list(KINDS)
