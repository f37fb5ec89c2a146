"""Fixtures of the deployment tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def helm() -> str:
    """helm from .tools/bin (scripts/install_helm.sh, as .ci/run installs it), installed on first use."""
    local = ROOT / ".tools" / "bin" / "helm"
    if not local.exists():
        subprocess.run(["bash", str(ROOT / "scripts" / "install_helm.sh")], check=True, capture_output=True)
    return str(local)
