"""Fixtures of the deployment tests: helm and the image, installed or built on first use."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.first_use import BUILD_IMAGE, install_once, installed, podman_installable

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def helm() -> str:
    """helm from .tools/bin (scripts/install_helm.sh), installed on first use."""
    local = ROOT / ".tools" / "bin" / "helm"
    install_once(ROOT / "scripts" / "install_helm.sh", local.exists)
    return str(local)


@pytest.fixture(scope="session")
def windjoin_image() -> str:
    """localhost/windjoin built by scripts/build_image.sh, which also installs podman (root, apt-get) when missing.

    Always run (idempotent: podman's layer cache makes an unchanged tree seconds, a code change rebuilds the last
    layers), so the stack test runs the current code. Skipped only where podman is absent and cannot be installed.
    """
    if not podman_installable():
        pytest.skip("podman is missing and scripts/build_image.sh can install it only as root with apt-get")
    installed(BUILD_IMAGE)
    return "localhost/windjoin"
