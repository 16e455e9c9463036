"""The `convfuse` C tool and `python -m convfuse`: exit codes, help, and equal checksums on the same seeded inputs."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import convfuse
from convfuse import _lib

ROOT = Path(__file__).resolve().parents[2]


def find_cli():
    env = os.environ.get("CONVFUSE_CLI")
    if env:
        return Path(env)
    p = _lib.library_path().parent / "convfuse"  # the build folder holds both
    return p if p.is_file() else None


def run_c(*a):
    cli = find_cli()
    if cli is None:
        pytest.skip("convfuse CLI not built next to the library (set CONVFUSE_CLI)")
    return subprocess.run([str(cli), *a], capture_output=True, text=True, timeout=300)


def run_py(*a):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"), CONVFUSE_LIBRARY=str(_lib.library_path()))
    return subprocess.run([sys.executable, "-m", "convfuse", *a], capture_output=True, text=True, timeout=300,
                          env=env)


def numbers(out, key):
    m = re.search(rf"^{key} (.*)$", out, re.M)
    assert m, f"no '{key}' line in:\n{out}"
    return [float(v) for v in re.findall(r"=([-+0-9.eE]+)", m.group(1))]


@pytest.mark.parametrize("problem,extra", [("kb2-91", []), ("kb2-73", ["--mode", "train"]),
                                           ("kb2-73", ["--mode", "eval"])])
def test_c_and_python_cli_agree(problem, extra):
    a = ["run", problem, "--batch", "1", "--backend", "cpu", "--seed", "3", *extra]
    c, p = run_c(*a), run_py(*a)
    assert c.returncode == 0, c.stderr
    assert p.returncode == 0, p.stderr
    print(c.stdout)
    assert "impl cpu_reference" in c.stdout and "impl cpu_reference" in p.stdout
    cs, ps = numbers(c.stdout, "checksum"), numbers(p.stdout, "checksum")
    # sum|y| is well conditioned: relative 1e-9 (summation order differs). sum(y) after training BN is ~0:
    # compare it against the scale of sum|y|.
    assert ps[1] == pytest.approx(cs[1], rel=1e-9)
    assert abs(ps[0] - cs[0]) <= 1e-9 * cs[1]
    if "train" in extra:
        assert numbers(c.stdout, "running stats") == pytest.approx(numbers(p.stdout, "running stats"), rel=1e-9)


def test_c_cli_default_run_reports_reduced_shape():
    r = run_c("run", "kb2-73", "--batch", "1")
    assert r.returncode == 0, r.stderr
    assert "CPU backend at reduced shape N=1" in r.stdout
    assert re.search(r"^time [0-9.]+ ms", r.stdout, re.M)


@pytest.mark.parametrize("argv,code", [
    ([], 2), (["--help"], 0), (["--version"], 0), (["info"], 0), (["run", "--help"], 0), (["run"], 2),
    (["run", "kb2-91", "--help"], 0), (["run", "kb2-73", "--help"], 0), (["run", "kb2-99"], 2),
    (["run", "kb2-91", "--mode", "eval"], 2), (["run", "kb2-91", "--batch", "0"], 2),
    (["run", "kb2-91", "--batch"], 2), (["frobnicate"], 2), (["run", "kb2-73", "--backend", "gpu"], 2),
])
def test_c_cli_exit_codes(argv, code):
    r = run_c(*argv)
    assert r.returncode == code, (r.stdout, r.stderr)
    if "--help" in argv:
        assert "usage: convfuse" in r.stdout and "exit codes" in r.stdout


def test_c_cli_version_matches_package():
    r = run_c("--version")
    assert r.stdout.startswith(f"convfuse {convfuse.__version__} (library {convfuse.__version__}")


@pytest.mark.parametrize("argv,code", [(["--version"], 0), (["info"], 0), (["run", "--help"], 0),
                                       (["run", "kb2-99"], 2), (["run", "kb2-91", "--mode", "eval"], 2), ([], 2)])
def test_python_cli_exit_codes(argv, code):
    r = run_py(*argv)
    assert r.returncode == code, (r.stdout, r.stderr)
