"""Debug aid for convt_s2: run test_convt_s2's cases and print where the output differs from float64 torch."""
import sys
sys.path[:0] = ["tests/python", "tests/gpu", "python"]
import collections
import torch
from cf_testlib import eager, materialize, snapshot_bn, convfuse_chain, conv_kwargs
import convfuse
from test_convt_s2 import CASES, ct

torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
extra = [ct(1, 8, 2, 64, 64), ct(1, 8, 2, 64, 128), ct(1, 8, 2, 128, 64), ct(1, 8, 1, 192, 10, chain=[("tanh",), ("relu",)])]
quick = len(sys.argv) > 1 and sys.argv[1] == "quick"
todo = [ct(1, 8, 2, 64, 128, chain=[("sigmoid",)]), ct(1, 8, 2, 16, 128, op=(0, 0), chain=[("relu",)]),
        ct(1, 64, 4, 64, 128)] if quick else [c for c in extra] + [c for c, _ in CASES]
for case in todo:
    t = materialize(case, torch.Generator().manual_seed(3), device="cuda")
    before = snapshot_bn(t)
    oh, ow = case.out_hw()
    out = torch.full((case.n, case.c_out, oh, ow), float("nan"), device="cuda")
    convfuse.conv_chain(t["x"], t["weight"], t["bias"], convfuse_chain(case, t), transposed=True, backend="cuda",
                        out=out, **conv_kwargs(case))
    torch.cuda.synchronize()
    ref, _ = eager(case, before, torch.float64)
    o = out.double()
    bad = (torch.isnan(o) != torch.isnan(ref)) | ((o - ref).abs() > 1e-4 + 1e-4 * ref.abs())
    nb = int(bad.sum())
    print(f"{case.line()}: out {tuple(out.shape)} bad {nb} (nan {int(torch.isnan(o).sum())})")
    if nb:
        idx = bad.nonzero().cpu()
        for d, name in enumerate("n c h w".split()):
            cnt = collections.Counter(idx[:, d].tolist())
            print(f"   {name}: {len(cnt)} distinct; {sorted(cnt.items())[:12]}{' ...' if len(cnt) > 12 else ''}")
        i0 = tuple(idx[0].tolist())
        print(f"   first {i0}: got {o[i0].item():.6g} want {ref[i0].item():.6g}")
