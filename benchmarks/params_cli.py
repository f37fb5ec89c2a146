"""A benchmark's parameters (a dataclass of defaults) as command-line flags, with a --quick set of overrides."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path
from typing import Any


def add_param_flags(parser: argparse.ArgumentParser, defaults: Any) -> None:
    """One --flag per field of `defaults` (booleans as --x/--no-x); unset flags keep the default."""
    for name, value in asdict(defaults).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None)
        else:
            parser.add_argument(flag, type=type(value), default=None)


def params_from(args: argparse.Namespace, defaults: Any, quick: dict[str, Any]) -> Any:
    """The parameters: the defaults, then `quick` with --quick, then every flag given."""
    values = asdict(defaults)
    if args.quick:
        values.update(quick)
    values.update({name: getattr(args, name) for name in values if getattr(args, name) is not None})
    return type(defaults)(**values)


def benchmark_parser(doc: str | None, defaults: Any, quick: dict[str, Any], out: Path) -> argparse.ArgumentParser:
    """The flags most benchmarks take: --quick (a smoke run with `quick`), --out, and one per parameter."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: {quick}")
    parser.add_argument("--out", type=Path, default=out)
    add_param_flags(parser, defaults)
    return parser
