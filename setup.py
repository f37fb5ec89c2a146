"""The package list, derived from the source folders so a new sub-package is never missing from the wheel.

Everything else about the project is in pyproject.toml; setuptools cannot map folders onto `windjoin.*` names
and discover their sub-packages from pyproject.toml alone.
"""

from setuptools import find_packages, setup

SOURCE_FOLDERS = ("operators", "connectors", "pipelines")

packages = ["windjoin"] + [
    f"windjoin.{name}" for name in find_packages(include=[pattern for f in SOURCE_FOLDERS for pattern in (f, f"{f}.*")])
]
setup(packages=packages, package_dir={"windjoin": "windjoin", **{f"windjoin.{f}": f for f in SOURCE_FOLDERS}})
