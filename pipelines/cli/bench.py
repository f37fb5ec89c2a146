"""`windjoin bench NAME`: run one of the repository's benchmarks (`benchmarks/NAME.py`) by name.

The benchmarks live beside the package in a source checkout (they are not installed: they carry results files
and plots), so the command finds them next to the package folders and runs `python -m benchmarks.NAME` there
with the same interpreter; options after NAME go to the benchmark (`windjoin bench kernels --quick`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

MAIN_GUARD = 'if __name__ == "__main__":'
FLINK_SIDE = {"flink_job"}  # runs inside Flink's venv, started by the flink_peer benchmark


def checkout_root() -> Path:
    """The source checkout holding this package's folders (this file is pipelines/cli/bench.py in it)."""
    return Path(__file__).resolve().parents[2]


def benchmark_names(root: Path) -> list[str]:
    """The benchmarks of a checkout: the runnable modules of benchmarks/ (shared helpers have no main guard)."""
    folder = root / "benchmarks"
    runnable = (p.stem for p in folder.glob("*.py") if MAIN_GUARD in p.read_text() and p.stem not in FLINK_SIDE)
    return sorted(runnable) if folder.is_dir() else []


@click.command("bench", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("name", required=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench(name: str | None, args: tuple[str, ...]) -> None:
    """Run benchmark NAME (benchmarks/NAME.py of the source checkout) with ARGS; without NAME, list them.

    Each writes benchmarks/results/NAME.json (and a plot) and prints a table; `--help` after NAME shows its
    options, `--quick` makes a smoke run."""
    root = checkout_root()
    names = benchmark_names(root)
    if not names:
        raise click.ClickException(
            f"no benchmarks/ folder beside the package at {root}: benchmarks run from a source checkout "
            "(pip install -e .)"
        )
    if name is None:
        click.echo("\n".join(names))
        return
    if name not in names:
        raise click.BadParameter(f"{name!r} is not a benchmark; accepted: {', '.join(names)}", param_hint="NAME")
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", *args], cwd=root, check=False)
    sys.exit(done.returncode)
