"""The join predicate ops, one class each (base.py says what one is); a new op is one more module here.

Importing this package imports every module in it, so each op's `@register` has run before any spec is read.
"""

from __future__ import annotations

import importlib
import pkgutil

from windjoin.operators.predicate_ops.base import IndexKind, PredicateOp, value_range
from windjoin.operators.predicate_ops.registry import REGISTRY, op_named, op_names, register

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["REGISTRY", "IndexKind", "PredicateOp", "op_named", "op_names", "register", "value_range"]
