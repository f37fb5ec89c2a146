"""The window kinds, one module each (base.py says what one is); a new kind is one more module here.

Importing this package imports every module in it, so each kind's `@register` has run before any spec is read:
time and count first (errors list the kinds in registration order), then the others by name.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Annotated, Union

from pydantic import Field

from windjoin.operators.windows.base import ProbeView, Reach, WindowKind
from windjoin.operators.windows.registry import KINDS, kind_names, register

_FIRST = ("time", "count")
for _name in [*_FIRST, *sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in _FIRST)]:
    importlib.import_module(f"{__name__}.{_name}")

# The spec's `window` key: one of the registered kinds, chosen by its `kind` tag.
Window = Annotated[Union[tuple(KINDS.values())], Field(discriminator="kind")]  # noqa: UP007 - built at run time

__all__ = ["KINDS", "ProbeView", "Reach", "Window", "WindowKind", "kind_names", "register"]
