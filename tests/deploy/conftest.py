"""Fixtures of the deployment tests: helm and the image, installed or built on first use."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.first_use import BackgroundInstall, install_once

ROOT = Path(__file__).resolve().parents[2]
BUILD_IMAGE = ROOT / "scripts" / "build_image.sh"
_image_build: list[BackgroundInstall] = []  # started once the session is known to need the image


def _podman_installable() -> bool:
    return shutil.which("podman") is not None or (os.geteuid() == 0 and shutil.which("apt-get") is not None)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start building the image as soon as the session's tests are known to need it: from empty storage it takes
    minutes of downloads and unpacking, which the tests collected before the deployment tests then overlap."""
    wanted = any("windjoin_image" in item.fixturenames for item in session.items)
    if wanted and not session.config.option.collectonly and _podman_installable():
        _image_build.append(BackgroundInstall(BUILD_IMAGE, lambda: False))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A session that ends before the image was needed (-x, a keyboard interrupt) still waits for its build: a
    build left running outside any session would hold no lock, and the next session would start another."""
    for build in _image_build:
        build.join()


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
    if not _podman_installable():
        pytest.skip("podman is missing and scripts/build_image.sh can install it only as root with apt-get")
    if _image_build:
        _image_build[0].wait()
    else:
        install_once(BUILD_IMAGE, lambda: False)
    return "localhost/windjoin"
