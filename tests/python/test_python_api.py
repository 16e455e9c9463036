"""Every error path of the Python layer: the right exception type, naming the argument at fault."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import convfuse
from convfuse import _lib

ROOT = Path(__file__).resolve().parents[2]


def args(**over):
    """A valid conv_chain call (KB2-91 chain, transposed), with some arguments replaced."""
    a = dict(x=torch.rand(2, 3, 5, 5), weight=torch.rand(3, 4, 3, 3), bias=torch.rand(4),
             chain=[("softmax_channels",), ("add_channel", torch.rand(4, 1, 1)), ("mul_scalar", 2.0), ("sigmoid",)],
             transposed=True, stride=2, padding=1, output_padding=1)
    a.update(over)
    return a


def call(**over):
    a = args(**over)
    return convfuse.conv_chain(a.pop("x"), a.pop("weight"), a.pop("bias"), a.pop("chain"), **a)


def test_valid_call_works():
    y = call()
    assert y.shape == (2, 4, 10, 10) and y.dtype == torch.float32


@pytest.mark.parametrize("name,value", [
    ("x", torch.rand(2, 3, 5, 5, dtype=torch.float64)),
    ("weight", torch.rand(3, 4, 3, 3).half()),
    ("bias", torch.arange(4)),
    ("x", [[1.0]]),
])
def test_wrong_dtype_or_type_is_type_error(name, value):
    with pytest.raises(TypeError, match=f"^{name}"):
        call(**{name: value})


def test_chain_vector_dtype():
    with pytest.raises(TypeError, match=r"chain\[1\] \(add_channel\) vector: expected dtype torch.float32"):
        call(chain=[("softmax_channels",), ("add_channel", torch.rand(4, dtype=torch.float64))])


@pytest.mark.parametrize("name,value,pattern", [
    ("x", torch.rand(3, 5, 5), r"x: expected a 4-D \(N, C_in, H, W\)"),
    ("weight", torch.rand(2, 4, 3, 3), r"weight: expected shape \(3, C_out/groups, KH, KW\)"),
    ("weight", torch.rand(4, 3, 3), r"weight: expected a 4-D"),
    ("bias", torch.rand(5), r"bias: expected shape \(4,\)"),
    ("stride", 0, r"stride: must be >= 1"),
    ("padding", -1, r"padding: must be >= 0"),
    ("dilation", (1, 0), r"dilation: must be >= 1"),
    ("stride", (1, 2, 3), r"stride: expected an int or a pair"),
    ("backend", "tpu", r"backend: expected 'auto', 'cpu' or 'cuda'"),
    ("backend", "cuda", r"backend: 'cuda' needs cuda tensors"),
    ("math", "fast", r"math: expected one of"),
])
def test_wrong_shape_or_value_is_value_error(name, value, pattern):
    with pytest.raises(ValueError, match=pattern):
        call(**{name: value})


def test_conv_weight_shape_and_output_padding():
    with pytest.raises(ValueError, match=r"weight: expected shape \(C_out, 3, KH, KW\)"):
        call(transposed=False, output_padding=0, weight=torch.rand(4, 2, 3, 3))
    with pytest.raises(ValueError, match=r"output_padding: only for transposed"):
        call(transposed=False, weight=torch.rand(4, 3, 3, 3))


def test_library_rejections_are_value_errors_with_its_message():
    # output_padding must be < stride or < dilation (the library checks it, and says which).
    with pytest.raises(ValueError, match="out_pad") as e:
        call(stride=1, output_padding=1)
    assert isinstance(e.value, convfuse.ConvfuseError) and e.value.status == "CF_STATUS_INVALID_ARGUMENT"
    # Empty output: a 7x7 kernel on a 5x5 input without padding.
    with pytest.raises(ValueError) as e:
        call(transposed=False, output_padding=0, padding=0, weight=torch.rand(4, 3, 7, 7))
    assert e.value.status == "CF_STATUS_INVALID_SHAPE"


def test_type_errors_for_stride_types():
    with pytest.raises(TypeError, match="stride"):
        call(stride=1.5)
    with pytest.raises(TypeError, match="stride"):
        call(stride=True)


def test_chain_errors():
    v = torch.rand(4)
    with pytest.raises(TypeError, match="chain: expected a list"):
        call(chain=("relu",))
    with pytest.raises(ValueError, match=r"chain\[0\] \(swish\): unknown op 'swish'"):
        call(chain=[("swish",)])
    with pytest.raises(ValueError, match=r"chain\[0\] \(add_channel\): expected 1 argument"):
        call(chain=[("add_channel",)])
    with pytest.raises(ValueError, match=r"chain\[0\] \(relu\): expected 0 argument"):
        call(chain=[("relu", v)])
    with pytest.raises(ValueError, match=r"chain\[0\] \(add_channel\) vector: expected shape \(4,\)"):
        call(chain=[("add_channel", torch.rand(5))])
    with pytest.raises(ValueError, match=r"chain\[0\] \(add_channel\) vector: expected shape"):
        call(chain=[("add_channel", torch.rand(1, 1, 4))])  # would broadcast along W in torch, not channels
    with pytest.raises(TypeError, match=r"chain\[0\] \(mul_scalar\) scalar: expected a real number"):
        call(chain=[("mul_scalar", "2")])
    with pytest.raises(TypeError, match=r"chain\[1\]: expected a tuple"):
        call(chain=[("relu",), 3])
    with pytest.raises(ValueError, match="chain: empty"):
        call(chain=[])
    with pytest.raises(ValueError, match=r"chain\[0\] \(affine_channel\) shift"):
        call(chain=[("affine_channel", v, torch.rand(3))])
    # Non-finite scalars are refused by the library (named there).
    with pytest.raises(ValueError):
        call(chain=[("mul_scalar", float("inf"))])
    # A bare op name is accepted.
    assert call(chain=["relu", "tanh"]).shape == (2, 4, 10, 10)


def test_chain_too_long_is_not_supported():
    with pytest.raises(convfuse.NotSupportedError) as e:
        call(chain=[("relu",)] * (_lib.CHAIN_MAX_OPS + 1))
    assert isinstance(e.value, NotImplementedError)
    assert e.value.status == "CF_STATUS_NOT_SUPPORTED"
    call(chain=[("relu",)] * _lib.CHAIN_MAX_OPS)


def test_groups_not_supported():
    with pytest.raises(convfuse.NotSupportedError):
        convfuse.conv_chain(torch.rand(1, 4, 5, 5), torch.rand(6, 2, 3, 3), None, [("relu",)], transposed=False,
                            groups=2)


def bn(**over):
    c = 4
    d = dict(training=True, eps=1e-5, momentum=0.1, weight=torch.ones(c), bias=torch.zeros(c),
             running_mean=torch.zeros(c), running_var=torch.ones(c), num_batches_tracked=torch.tensor(0))
    d.update(over)
    return [("batch_norm", d)]


@pytest.mark.parametrize("over,exc,pattern", [
    (dict(training=False, running_mean=None, running_var=None), ValueError, "training=False needs running_mean"),
    (dict(running_var=None), ValueError, "both running_mean and running_var"),
    (dict(momentum=None, num_batches_tracked=None), ValueError, "momentum=None .* needs num_batches_tracked"),
    (dict(running_mean=torch.zeros(8)[::2]), ValueError, "running_mean: must be contiguous"),
    (dict(running_var=torch.ones(5)), ValueError, r"running_var: expected 4 element"),
    (dict(num_batches_tracked=torch.tensor(0.0)), TypeError, "num_batches_tracked: expected dtype torch.int64"),
    (dict(running_mean=torch.zeros(4, dtype=torch.float64)), TypeError, "running_mean: expected dtype"),
    (dict(weight=torch.ones(3)), ValueError, r"\(batch_norm\) weight: expected shape \(4,\)"),
    (dict(foo=1), ValueError, "unknown key"),
    (dict(eps=0.0), ValueError, r"chain\[0\] \(batch_norm\): .*eps = 0"),
    (dict(momentum=1.5), ValueError, r"chain\[0\] \(batch_norm\): .*momentum = 1.5"),
])
def test_batch_norm_errors(over, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call(chain=bn(**over))


def test_batch_norm_without_training_key():
    with pytest.raises(ValueError, match="'training'"):
        call(chain=[("batch_norm", {"eps": 1e-5})])


def test_device_mismatch_names_the_argument():
    with pytest.raises(ValueError, match=r"weight: is on meta, expected cpu"):
        call(weight=torch.empty(3, 4, 3, 3, device="meta"))
    with pytest.raises(ValueError, match=r"chain\[1\] \(add_channel\) vector: is on meta"):
        call(chain=[("softmax_channels",), ("add_channel", torch.empty(4, device="meta"))])


def test_unsupported_device():
    with pytest.raises(convfuse.NotSupportedError, match="meta"):
        call(x=torch.empty(2, 3, 5, 5, device="meta"), weight=torch.empty(3, 4, 3, 3, device="meta"),
             bias=None, chain=[("relu",)])


def test_out_argument_errors():
    with pytest.raises(ValueError, match=r"out: expected shape \(2, 4, 10, 10\)"):
        call(out=torch.empty(2, 4, 10, 9))
    with pytest.raises(TypeError, match="out: expected dtype torch.float32"):
        call(out=torch.empty(2, 4, 10, 10, dtype=torch.float64))
    with pytest.raises(ValueError, match="out: must be contiguous"):
        call(out=torch.empty(2, 4, 10, 10).transpose(2, 3))


def test_cuda_plan_without_cuda_is_backend_unavailable():
    if _lib.backend_available("cuda"):
        pytest.skip("CUDA backend available here")
    desc = _lib.conv_desc(_lib.CONV_2D, 1, 2, 5, 5, 3, 3, 3)
    chain = _lib.Chain([("relu", ())])
    with pytest.raises(convfuse.BackendUnavailableError) as e:
        _lib.Plan(desc, chain, "cuda", "default")
    assert isinstance(e.value, RuntimeError) and e.value.status == "CF_STATUS_BACKEND_UNAVAILABLE"
    assert e.value.message  # cf_last_error() text came along


def test_exception_hierarchy():
    assert issubclass(convfuse.NotSupportedError, NotImplementedError)
    assert issubclass(convfuse.NotSupportedError, convfuse.ConvfuseError)
    assert issubclass(convfuse.BackendUnavailableError, RuntimeError)
    assert issubclass(convfuse.InvalidArgumentError, ValueError)
    assert issubclass(convfuse.ConvfuseError, RuntimeError)


def test_info_and_versions():
    d = convfuse.info()
    assert d["version"] == convfuse.__version__ == d["library_version"]
    assert d["cpu_available"] is True
    assert isinstance(d["cuda_available"], bool)
    assert d["library_version_string"].startswith(convfuse.__version__)
    assert d["build_flags"]
    # The three places a version is written agree.
    header = (ROOT / "include" / "convfuse.h").read_text()
    hv = ".".join(header.split(f"#define CF_VERSION_{k} ")[1].split()[0] for k in ("MAJOR", "MINOR", "PATCH"))
    cm = (ROOT / "CMakeLists.txt").read_text().split("project(convfuse VERSION ")[1].split()[0]
    assert hv == cm == convfuse.__version__


def test_struct_mirrors_match_the_header_sizes():
    # cf_conv_desc_t: int + 16 int64 + 2 int (padded); cf_args_t: 4 pointers + 16 * 5 pointers.
    import ctypes
    assert ctypes.sizeof(_lib.ConvDesc) == 8 + 16 * 8 + 8
    assert ctypes.sizeof(_lib.OpArgs) == 5 * ctypes.sizeof(ctypes.c_void_p)
    assert ctypes.sizeof(_lib.Args) == (4 + 16 * 5) * ctypes.sizeof(ctypes.c_void_p)
    # cf_conv_desc_init fills PyTorch's defaults.
    d = _lib.conv_desc(_lib.CONV_2D, 1, 2, 3, 4, 5, 6, 7)
    assert (d.stride_h, d.stride_w, d.pad_h, d.out_pad_w, d.dil_h, d.dil_w, d.groups, d.has_bias, d.dtype) == \
        (1, 1, 0, 0, 1, 1, 1, 1, _lib.DTYPE_F32)
    assert (d.n, d.c_in, d.h, d.w, d.c_out, d.kh, d.kw) == (1, 2, 3, 4, 5, 6, 7)


def test_missing_library_is_a_clear_error():
    code = "import convfuse, torch\ntry:\n    convfuse.info()['error'] and print('NOTFOUND')\n" \
           "    convfuse.conv_chain(torch.rand(1,1,3,3), torch.rand(1,1,1,1), None, ['relu'], transposed=False)\n" \
           "except convfuse.LibraryNotFoundError as e:\n    print('RAISED', e)\n"
    env = dict(os.environ, CONVFUSE_LIBRARY="/nonexistent/libconvfuse.so", PYTHONPATH=str(ROOT / "python"))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "NOTFOUND" in r.stdout and "RAISED" in r.stdout and "/nonexistent/libconvfuse.so" in r.stdout, r
