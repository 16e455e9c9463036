"""The `convfuse` C tool and `python -m convfuse`: exit codes, help, --json, list, info, and equal checksums on the same
seeded inputs. CPU only: without a device the C tool runs the CPU backend (checked against its own float64 formula)."""

import json
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


# ---- the C tool's run/list/info surface (docs/cli.md)

SMALL91 = ["--shape", "1,64,8,8"]
SMALL73 = ["--shape", "2,8,16,16"]


def cuda_usable():
    return "backends: cpu, cuda" in run_c("info").stdout


@pytest.mark.parametrize("problem,extra", [("kb2-91", SMALL91), ("kb2-73", SMALL73 + ["--mode", "train"]),
                                           ("kb2-73", SMALL73 + ["--mode", "eval"])])
def test_c_cli_json(problem, extra):
    r = run_c("run", problem, "--device", "cpu", "--json", *extra)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)  # one object, nothing else on stdout
    assert j["problem"] == problem and j["device"] == "cpu" and j["impl"] == "cpu_reference"
    assert j["shape"]["n"] == int(extra[1].split(",")[0])
    assert j["check"]["pass"] is True and j["check"]["bad"] == 0 and j["exit_code"] == 0
    assert j["check"]["positions"] >= min(10000, j["shape"]["n"] * j["shape"]["c_out"] * j["shape"]["oh"] *
                                          j["shape"]["ow"])
    assert 0 <= j["check"]["max_abs_err"] < 1e-5
    assert j["time_ms"]["median"] > 0 and j["bytes"] > 0 and j["gbs"] > 0
    assert j["floor_bw_gbs"] == 3000
    assert j["pct_of_floor"] == pytest.approx(100 * j["floor_ms"] / j["time_ms"]["median"], rel=1e-6)
    if "train" in extra:
        assert "whole batch" in j["check"]["bn_stats"] and j["check"]["running_stats_err"] < 1e-5


def test_c_cli_table_and_sampled_check():
    r = run_c("run", "kb2-91", "--device", "cpu", "--shape", "2,16,24,24", "--samples", "100", "--bw", "1000")
    assert r.returncode == 0, r.stderr
    assert "seeded sample of 100 pixels x 128 channels" in r.stdout
    assert re.search(r"^impl +time_ms +GB/s +%floor +max_abs_err$", r.stdout, re.M)
    assert re.search(r"^cpu_reference +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.e+-]+$", r.stdout, re.M)
    assert "at 1000 GB/s" in r.stdout and "check: PASS" in r.stdout


def test_c_cli_full_check_covers_every_pixel():
    r = run_c("run", "kb2-73", "--device", "cpu", "--mode", "train", "--check", "full", "--json", *SMALL73)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert "every pixel" in j["check"]["reference"]
    assert j["check"]["positions"] == 2 * 64 * 14 * 14


def test_c_cli_check_failure_exits_1():
    r = run_c("run", "kb2-91", "--device", "cpu", "--tol", "0", *SMALL91)  # float32 output vs float64: not exact
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "check: FAIL" in r.stdout and "check failed" in r.stderr and "reproduce: convfuse run kb2-91" in r.stderr
    j = json.loads(run_c("run", "kb2-91", "--device", "cpu", "--tol", "0", "--json", *SMALL91).stdout)
    assert j["check"]["pass"] is False and j["exit_code"] == 1


def test_c_cli_device_cuda_without_cuda_exits_3():
    if cuda_usable():
        pytest.skip("CUDA is usable here")
    r = run_c("run", "kb2-91", "--device", "cuda", *SMALL91)
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert "--device cuda" in r.stderr


def test_c_cli_cpu_default_is_reduced_and_says_so():
    if cuda_usable():
        pytest.skip("CUDA is usable here: the default run is the full shape on the device")
    r = run_c("run", "kb2-73", "--mode", "eval", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["device"] == "cpu" and j["shape"]["n"] == 2 and "reduced shape N=2" in j["note"]


@pytest.mark.parametrize("shape", ["1,2,3", "1,2,3,4,5", "a,b,c,d", "0,8,16,16", "1,8,-1,16", "", "1,8,16,16,",
                                   "1;8;16;16", "1,8,2,2", "1048576,1048576,64,64", "1,8,16,99999999999"])
def test_c_cli_shape_errors_exit_2(shape):
    r = run_c("run", "kb2-73", "--device", "cpu", "--shape", shape)
    assert r.returncode == 2, (shape, r.stdout, r.stderr)
    assert "shape" in r.stderr


@pytest.mark.parametrize("argv", [["--iters", "0"], ["--device", "gpu"], ["--check", "most"], ["--bw", "-1"],
                                  ["--tol", "x"], ["--samples", "0"], ["--json", "extra"], ["--mode", "eval", "--iters"]])
def test_c_cli_option_errors_exit_2(argv):
    r = run_c("run", "kb2-91", *argv)
    assert r.returncode == 2, (argv, r.stdout, r.stderr)


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["run", "kb2-91", "--help"], ["run", "kb2-73", "-h"],
                                  ["list", "--help"], ["info", "--help"]])
def test_c_cli_help_for_each_command(argv):
    r = run_c(*argv)
    assert r.returncode == 0, r.stderr
    assert "usage: convfuse" in r.stdout
    assert "exit codes: 0 ok, 1 output check failed, 2 usage error, 3 runtime or CUDA error" in r.stdout


def test_c_cli_list():
    r = run_c("list")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "n128c64h64w64k128r4s2p1op1t:softmax_channels,add_channel,mul_scalar:2,sigmoid" in out
    assert out.count("cpu:          cpu_reference") >= 10
    assert "refused: CF_STATUS_NOT_SUPPORTED: desc.groups = 2" in out
    for op in ("add_channel", "batch_norm", "softmax_channels", "gelu"):
        assert op in out.splitlines()[0]
    if cuda_usable():
        assert "cuda default: cuda_" in out
    else:
        assert "cuda: unavailable here" in out
    assert run_c("list", "extra").returncode == 2


def test_c_cli_info():
    r = run_c("info")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"convfuse {convfuse.__version__} (")
    assert "build flags: library (" in r.stdout and re.search(r"^cuda device: ", r.stdout, re.M)
    assert re.search(r"^backends: cpu", r.stdout, re.M)
    assert run_c("info", "extra").returncode == 2
