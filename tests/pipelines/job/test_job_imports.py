"""The Spark job reads the controller's decisions through the decision store's own format, never through the
controller process: importing every job module loads no module of pipelines.controller."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import windjoin.pipelines.job as job


def test_the_job_imports_no_controller_module():
    modules = sorted(f"windjoin.pipelines.job.{p.stem}" for p in Path(job.__file__).parent.glob("[!_]*.py"))
    probe = "import sys\n" + "".join(f"import {m}\n" for m in modules)
    probe += "print(sorted(m for m in sys.modules if m.startswith('windjoin.pipelines.controller')))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"
