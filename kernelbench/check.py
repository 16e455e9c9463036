"""Check kernelbench/level2_{91,73}_convfuse.py the way KernelBench's evaluator does.

    python kernelbench/check.py                      # both problems; CUDA at KernelBench's shapes when a GPU is
                                                     # present, else CPU (C reference backend) at reduced shapes
    python kernelbench/check.py --problem 73 --mode eval --trials 10
    python kernelbench/check.py --problem 91 --ref path/to/91_ConvTranspose2d_Softmax_BiasAdd_Scaling_Sigmoid.py

What it does, as the evaluator (eval_kernel_against_ref / run_and_check_correctness) does:
  1. loads the original problem (its Model, get_inputs, get_init_inputs: from --ref, else the built-in definition
     below, which is the same module) and the solution file, exec'ing both into one namespace;
  2. set_seed(seed); init_inputs = get_init_inputs(); set_seed(seed); Model(*init); set_seed(seed); ModelNew(*init)
     (under no_grad), then moves both to the device;
  3. draws one seed per trial from torch.manual_seed(seed), and per trial: set_seed(trial_seed); inputs =
     get_inputs(); runs both models under no_grad in their default (train) mode and requires
     torch.allclose(out, out_new, atol=1e-4, rtol=1e-4) (KernelBench's fp32 tolerance).
Beyond the evaluator it checks that the two models' parameters are bit-identical, that the original's state_dict
loads into ModelNew (strict), that BatchNorm running statistics agree after the trials, and that no trial fell back
to PyTorch's ops (a pass through the fallback proves nothing about the kernels; --allow-fallback accepts it).
On CPU the inputs are reduced (batch 2, 16x16) because the C reference backend computes in double.
PyTorch's default TF32 settings are kept, as in the evaluator; --no-tf32 turns TF32 off for the reference.
Exit status 0 when every trial of every problem passes.
"""

import argparse
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if (ROOT / "python" / "convfuse").is_dir() and str(ROOT / "python") not in sys.path:
    try:
        import convfuse  # noqa: F401  (an installed package wins)
    except ImportError:
        sys.path.insert(0, str(ROOT / "python"))
import convfuse  # noqa: E402

TOL = 1e-4
SOLUTIONS = {"91": HERE / "level2_91_convfuse.py", "73": HERE / "level2_73_convfuse.py"}

# The original problems (KernelBench level 2 #91 and #73): the modules, their default shapes and init arguments.
REFERENCE = {
    "91": '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """ConvTranspose2d -> softmax(dim=1) -> + bias -> * scaling_factor -> sigmoid."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, bias_shape,
                 scaling_factor):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, output_padding=output_padding)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = self.conv_transpose(x)
        x = torch.softmax(x, dim=1)
        x = x + self.bias
        x = x * self.scaling_factor
        return torch.sigmoid(x)


batch_size, in_channels, out_channels, height, width = 128, 64, 128, 64, 64


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, 4, 2, 1, 1, (out_channels, 1, 1), 2.0]
''',
    "73": '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """Conv2d -> BatchNorm2d -> * scaling_factor."""

    def __init__(self, in_channels, out_channels, kernel_size, scaling_factor):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = self.conv(x)
        x = self.bn(x)
        return x * self.scaling_factor


batch_size, in_channels, out_channels, height, width = 128, 8, 64, 128, 128


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, 3, 2.0]
''',
}
REDUCED = dict(batch=2, height=16, width=16)


def set_seed(seed):
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed(seed)


def load(problem, ref_path):
    """(Model, get_inputs, get_init_inputs, ModelNew), exec'd into one namespace as the evaluator does."""
    context = {}
    src = Path(ref_path).read_text() if ref_path else REFERENCE[problem]
    exec(compile(src, str(ref_path or f"<KernelBench level2 #{problem}>"), "exec"), context)
    Model, get_inputs, get_init_inputs = context["Model"], context["get_inputs"], context["get_init_inputs"]
    exec(compile(SOLUTIONS[problem].read_text(), str(SOLUTIONS[problem]), "exec"), context)
    return Model, get_inputs, get_init_inputs, context["ModelNew"]


def reduced_inputs(init_inputs):
    c_in = init_inputs[0]
    return [torch.rand(REDUCED["batch"], c_in, REDUCED["height"], REDUCED["width"])]


def check(problem, device, trials=5, seed=42, mode="train", ref_path=None, reduced=None, allow_fallback=False,
          log=print):
    """Run the evaluator's procedure for one problem; returns True when every check passes."""
    Model, get_inputs, get_init_inputs, ModelNew = load(problem, ref_path)
    reduced = device.type == "cpu" if reduced is None else reduced
    set_seed(seed)
    init_inputs = get_init_inputs()
    with torch.no_grad():
        set_seed(seed)
        model = Model(*init_inputs)
        set_seed(seed)
        model_new = ModelNew(*init_inputs)
    ok = True
    ref_state, new_state = model.state_dict(), model_new.state_dict()
    if list(ref_state) != list(new_state):
        log(f"  FAIL state_dict keys differ: {list(ref_state)} vs {list(new_state)}")
        return False
    differing = [k for k in ref_state if not torch.equal(ref_state[k], new_state[k])]
    if differing:
        log(f"  FAIL parameters differ under one seed: {differing}")
        ok = False
    model_new.load_state_dict(ref_state, strict=True)
    model, model_new = model.to(device), model_new.to(device)
    if mode == "eval":
        model.eval()
        model_new.eval()

    convfuse.reset_fallback_counts()
    torch.manual_seed(seed)
    trial_seeds = [torch.randint(0, 2**32 - 1, (1,)).item() for _ in range(trials)]
    passed = 0
    with torch.no_grad():
        for i, s in enumerate(trial_seeds):
            set_seed(s)
            inputs = reduced_inputs(init_inputs) if reduced else get_inputs()
            inputs = [t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs]
            out = model(*inputs)
            t0 = time.perf_counter()
            out_new = model_new(*inputs)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            dt = time.perf_counter() - t0
            if out.shape != out_new.shape:
                log(f"  trial {i}: FAIL shape {tuple(out_new.shape)} != {tuple(out.shape)}")
                ok = False
                continue
            diff = (out.double() - out_new.double()).abs()
            good = torch.allclose(out, out_new, atol=TOL, rtol=TOL)
            passed += good
            log(f"  trial {i} (seed {s}): {'PASS' if good else 'FAIL'} max|diff|={diff.max().item():.2e} "
                f"mean|diff|={diff.mean().item():.2e} shape={tuple(out.shape)} ModelNew {dt * 1e3:.1f} ms")
    ok = ok and passed == trials
    if problem == "73":
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            a, b = getattr(model.bn, name), getattr(model_new.bn, name)
            same = torch.allclose(a.double(), b.double(), atol=TOL, rtol=TOL)
            if not same:
                err = (a.double() - b.double()).abs().max().item()
                log(f"  FAIL bn.{name} differs after {trials} trials: max|diff|={err:.2e}")
                ok = False
    fallbacks = convfuse.fallback_counts()
    if fallbacks:
        log(f"  fallbacks to PyTorch's ops: {fallbacks}" + ("" if allow_fallback else " -> FAIL (--allow-fallback)"))
        ok = ok and allow_fallback
    log(f"  {passed}/{trials} trials passed")
    return ok


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problem", choices=["91", "73", "all"], default="all")
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--mode", choices=["train", "eval"], default="train", help="73 only matters (BatchNorm)")
    ap.add_argument("--ref", help="the original KernelBench problem file (only with a single --problem)")
    ap.add_argument("--full", action="store_true", help="KernelBench's shapes on CPU too (slow)")
    ap.add_argument("--no-tf32", action="store_true", help="turn PyTorch's TF32 off for the reference")
    ap.add_argument("--allow-fallback", action="store_true", help="accept trials served by PyTorch's ops")
    a = ap.parse_args(argv)
    if a.ref and a.problem == "all":
        ap.error("--ref needs --problem 91 or 73")
    device = torch.device("cuda" if a.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if a.device == "auto" else a.device))
    if a.no_tf32:
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    problems = ["91", "73"] if a.problem == "all" else [a.problem]
    info = convfuse.info()
    print(f"convfuse {info['version']} ({info.get('library_version_string')}), torch {torch.__version__}, "
          f"device {device}{' (reduced shapes)' if device.type == 'cpu' and not a.full else ''}, "
          f"cudnn tf32={torch.backends.cudnn.allow_tf32}")
    results = {}
    for p in problems:
        print(f"level2 #{p} ({SOLUTIONS[p].name}), mode {a.mode}:")
        results[p] = check(p, device, a.trials, a.seed, a.mode, a.ref, reduced=device.type == "cpu" and not a.full,
                           allow_fallback=a.allow_fallback)
    print("summary: " + ", ".join(f"#{p} {'PASS' if r else 'FAIL'}" for p, r in results.items()))
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
