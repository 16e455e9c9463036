"""`pip install .` (scikit-build-core driving the project's CMake, CPU-only here) installs a package that finds its
own libconvfuse.so and whose `python -m convfuse` runs. Skips, visibly, without scikit-build-core (no build isolation:
CI has no reason to fetch the build backend per run)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("scikit_build_core", reason="scikit-build-core not installed (pip install scikit-build-core)")


def test_pip_install_builds_and_installs_the_library(tmp_path):
    target = tmp_path / "site"
    env = {k: v for k, v in os.environ.items() if k != "CONVFUSE_LIBRARY"}
    env["CMAKE_ARGS"] = "-DCONVFUSE_CUDA=OFF"  # the CUDA compile is covered by the device runs, not CI
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--quiet",
                        "--target", str(target), str(ROOT)], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    pkg = target / "convfuse"
    assert (pkg / "libconvfuse.so").is_file() and (pkg / "modules.py").is_file() and (pkg / "_ops.py").is_file()
    assert not (pkg / "libconvfuse.so.0").exists()  # one library file, no symlink copies
    env["PYTHONPATH"] = str(target)
    run = dict(env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)  # cwd: not the repo
    r = subprocess.run([sys.executable, "-c", "import convfuse, json; print(json.dumps(convfuse.info()))"], **run)
    assert r.returncode == 0, r.stderr
    assert str(pkg / "libconvfuse.so") in r.stdout and '"cpu_available": true' in r.stdout
    r = subprocess.run([sys.executable, "-m", "convfuse", "--version"], **run)
    assert r.returncode == 0 and r.stdout.startswith("convfuse 0."), r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "convfuse", "run", "kb2-73", "--mode", "eval", "--backend", "cpu"],
                       **run)
    assert r.returncode == 0 and "checksum" in r.stdout, r.stdout + r.stderr
