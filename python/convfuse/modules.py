"""Drop-in nn.Modules for the two KernelBench level-2 blocks, and the block functions they (and the KernelBench
solution files in kernelbench/) call.

    ConvTranspose2dSoftmaxBiasScaleSigmoid(in_channels, out_channels, kernel_size, stride, padding, output_padding,
                                           bias_shape, scaling_factor)                         KernelBench 2/91
    Conv2dBatchNormScale(in_channels, out_channels, kernel_size, scaling_factor)               KernelBench 2/73

Each builds the original's submodules in the original's order (so under one torch.manual_seed the parameters are
bit-identical and state_dicts load both ways without renaming) and replaces only forward: one fused C call through
the torch.library op of _ops.py (CPU tensors: the C reference backend; CUDA: the fused kernels on the current stream).

When the fused path cannot serve, forward returns PyTorch's answer and says so: a FallbackWarning once per reason per
process and a count in fallback_counts(). Reasons:
    grad                 autograd is recording and an input or parameter requires grad (the ops have no backward)
    dtype                input/parameters not float32 (fp16, bf16, fp64)
    device               tensors on a device other than cpu/cuda
    channels_last        channels_last input: PyTorch's ops, which keep the memory format
    non_contiguous       other strided input: run fused on a contiguous copy
    unbatched            3-D (C, H, W) input: PyTorch's meaning (softmax(dim=1) is then over H)
    empty                a zero-size input
    module_config        a configuration the fused chain does not express (bias not one value per channel, groups,
                         padding_mode, a tensor scaling_factor, BatchNorm without num_batches_tracked and momentum=None)
    not_supported        the library refused the problem (convfuse.NotSupportedError; the warning carries its reason)
    backend_unavailable  the library has no usable CUDA backend (convfuse.BackendUnavailableError)
Under torch.compile the choice is made at trace time and is neither warned nor counted (Dynamo cannot trace
warnings.warn), and a library refusal raises from the compiled graph instead of falling back.
Errors PyTorch would raise (wrong type, channel count, dtype or device mismatch, too small an input) are raised, with
PyTorch's exception type and a message naming the argument.
"""

import numbers
import os
import sys
import threading
import warnings

import torch
import torch.nn as nn

from . import _ops
from ._lib import BackendUnavailableError, NotSupportedError

__all__ = [
    "ConvTranspose2dSoftmaxBiasScaleSigmoid",
    "Conv2dBatchNormScale",
    "convt_softmax_bias_scale_sigmoid_block",
    "conv_bn_scale_block",
    "fallback_counts",
    "reset_fallback_counts",
    "FallbackWarning",
]

# --------------------------------------------------------------------------------------------------------------
# Fallback bookkeeping.


class FallbackWarning(UserWarning):
    """A convfuse module returned PyTorch's answer instead of running the fused kernel (once per reason)."""


_counts = {}
_warned = set()
_counts_lock = threading.Lock()


def fallback_counts():
    """How many forward calls took each fallback, as {reason: count} (see this module's docstring for reasons)."""
    with _counts_lock:
        return dict(_counts)


def reset_fallback_counts():
    """Zero the counters and re-arm the once-per-reason warnings."""
    with _counts_lock:
        _counts.clear()
        _warned.clear()


def _is_compiling():
    fn = getattr(torch.compiler, "is_compiling", None)
    return bool(fn and fn())


_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_TORCH_MODULE_FILE = os.path.abspath(sys.modules[nn.Module.__module__].__file__)


def _user_stacklevel():
    """stacklevel for warnings.warn pointing at the line that called the model: past convfuse's frames, the forward
    that called them (a module's, or a KernelBench ModelNew's) and nn.Module.__call__."""
    level, f, forward_skipped = 1, sys._getframe(1), False
    while f is not None:
        path = os.path.abspath(f.f_code.co_filename)
        if path.startswith(_PKG_DIR) or path == _TORCH_MODULE_FILE:
            pass
        elif f.f_code.co_name == "forward" and not forward_skipped:
            forward_skipped = True
        else:
            return level
        f, level = f.f_back, level + 1
    return 1


def _note_fallback(reason, block, detail, action):
    if _is_compiling():
        return
    with _counts_lock:
        _counts[reason] = _counts.get(reason, 0) + 1
        first = reason not in _warned
        _warned.add(reason)
    if first:
        warnings.warn(f"convfuse {block}: {detail}; {action} (warned once per reason; counts in "
                      f"convfuse.fallback_counts())", FallbackWarning, stacklevel=_user_stacklevel())


# --------------------------------------------------------------------------------------------------------------
# Checks shared by both blocks. Errors mirror PyTorch's exception types and name the argument.


def _check_input(x, weight, in_channels, block, conv_name, ndims):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{block}: x: expected a torch.Tensor, got {type(x).__name__}")
    if x.dim() not in ndims:
        want = " or ".join(f"{d}-D" for d in ndims)
        raise RuntimeError(f"{block}: x: expected a {want} input (N, C_in, H, W), got shape {tuple(x.shape)}")
    if x.dtype != weight.dtype:
        raise RuntimeError(f"{block}: x: dtype {x.dtype} differs from {conv_name}.weight's {weight.dtype} "
                           f"(input and weight must have the same dtype)")
    if x.device != weight.device:
        raise RuntimeError(f"{block}: x: is on {x.device}, {conv_name}.weight on {weight.device} "
                           f"(input and weight must be on the same device)")
    c = x.shape[-3]
    if c != in_channels:
        raise RuntimeError(f"{block}: x: expected {in_channels} channels ({conv_name}.in_channels), got {c} "
                           f"in shape {tuple(x.shape)}")


def _check_output_size(oh, ow, x, block):
    if oh < 1 or ow < 1:
        raise RuntimeError(f"{block}: x: spatial size {tuple(x.shape[-2:])} is too small: the convolution output "
                           f"would be {oh}x{ow}")


def _grad_needed(x, params):
    if not torch.is_grad_enabled():
        return False
    if x.requires_grad:
        return True
    for p in params:
        if p is not None and p.requires_grad:
            return True
    return False


def _common_reason(x, params):
    """(reason, detail) for the input-level fallbacks, or (None, None) when the fused op can take x."""
    if _grad_needed(x, params):
        return "grad", "gradients are required (autograd is on and an input or parameter requires grad)"
    for p in params:
        if p is not None and p.dtype != torch.float32:
            return "dtype", f"dtype {p.dtype} (the fused kernels are float32 only)"
    if x.device.type not in ("cpu", "cuda"):
        return "device", f"tensors on {x.device} (cpu or cuda only)"
    if x.dim() == 3:
        return "unbatched", "unbatched 3-D input (PyTorch's meaning differs: softmax/batch dims shift)"
    if x.numel() == 0:
        return "empty", f"zero-size input {tuple(x.shape)}"
    for p in params:
        if p is not None and p.device != x.device:
            return "device", f"parameters on {p.device}, input on {x.device}"
    return None, None


def _layout(x):
    """'ok', 'channels_last' or 'non_contiguous'."""
    if x.is_contiguous():
        return "ok"
    if x.is_contiguous(memory_format=torch.channels_last):
        return "channels_last"
    return "non_contiguous"


def _out_size(size, k, s, p, d, op=0, transposed=False):
    if transposed:
        return (size - 1) * s - 2 * p + d * (k - 1) + op + 1
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _plain_pair(v):
    return isinstance(v, tuple) and len(v) == 2 and all(isinstance(e, int) for e in v)


def _run_fused(call, x):
    """Run `call(x)`, or return (None, reason, detail) when the library refuses (eager mode only)."""
    if _is_compiling():
        return call(x), None, None
    try:
        return call(x), None, None
    except NotSupportedError as e:
        return None, "not_supported", f"the library refused the problem: {e.message}"
    except BackendUnavailableError as e:
        return None, "backend_unavailable", f"no usable CUDA backend: {e.message}"


# --------------------------------------------------------------------------------------------------------------
# KernelBench 2/91: ConvTranspose2d -> softmax(dim=1) -> + bias -> * scaling_factor -> sigmoid.

_B91 = "ConvTranspose2d+softmax+bias+scale+sigmoid"


def _eager_91(x, conv_transpose, bias, scaling_factor):
    x = conv_transpose(x)
    x = torch.softmax(x, dim=1)
    x = x + bias
    x = x * scaling_factor
    return torch.sigmoid(x)


def _config_reason_91(ct, bias, scaling_factor):
    c = ct.out_channels
    if tuple(bias.shape) not in ((c, 1, 1), (1, c, 1, 1)):
        return f"bias of shape {tuple(bias.shape)} (fused: ({c}, 1, 1), one value per output channel)"
    if isinstance(scaling_factor, bool) or not isinstance(scaling_factor, numbers.Real):
        return f"scaling_factor of type {type(scaling_factor).__name__} (fused: a Python number)"
    if ct.groups != 1 or ct.padding_mode != "zeros":
        return f"groups={ct.groups}, padding_mode={ct.padding_mode!r} (fused: groups=1, zeros)"
    if not all(_plain_pair(v) for v in (ct.stride, ct.padding, ct.output_padding, ct.dilation)):
        return "non-integer stride/padding/output_padding/dilation"
    return None


def convt_softmax_bias_scale_sigmoid_block(x, conv_transpose, bias, scaling_factor, math="default"):
    """sigmoid(scaling_factor * (softmax(conv_transpose(x), dim=1) + bias)) as one fused call, or PyTorch's ops
    when the fused path cannot serve (see the module docstring). `conv_transpose` is an nn.ConvTranspose2d,
    `bias` a (C_out, 1, 1) tensor, `scaling_factor` a number. Forward only (no autograd through the fused call)."""
    ct = conv_transpose
    _check_input(x, ct.weight, ct.in_channels, _B91, "conv_transpose", (3, 4))
    params = (ct.weight, ct.bias, bias)
    reason, detail = _common_reason(x, params)
    if reason is None:
        cfg = _config_reason_91(ct, bias, scaling_factor)
        if cfg is not None:
            reason, detail = "module_config", cfg
    if reason is None and bias.device != x.device:
        reason, detail = "device", f"bias on {bias.device}, input on {x.device}"
    if reason is None:
        oh = _out_size(x.shape[2], ct.kernel_size[0], ct.stride[0], ct.padding[0], ct.dilation[0],
                       ct.output_padding[0], True)
        ow = _out_size(x.shape[3], ct.kernel_size[1], ct.stride[1], ct.padding[1], ct.dilation[1],
                       ct.output_padding[1], True)
        _check_output_size(oh, ow, x, _B91)
        layout = _layout(x)
        if layout == "channels_last":
            reason, detail = "channels_last", "channels_last input"
    if reason is None:
        if layout == "non_contiguous":
            _note_fallback("non_contiguous", _B91, f"non-contiguous input (strides {x.stride()})",
                           "running the fused kernel on a contiguous copy")
            x = x.contiguous()

        def call(xx):
            return _ops.CONVT_SOFTMAX_BIAS_SCALE_SIGMOID(
                xx, ct.weight, ct.bias, bias, float(scaling_factor), list(ct.stride), list(ct.padding),
                list(ct.output_padding), list(ct.dilation), math)

        y, reason, detail = _run_fused(call, x)
        if reason is None:
            return y
    _note_fallback(reason, _B91, detail, "running PyTorch's ops instead")
    return _eager_91(x, ct, bias, scaling_factor)


class ConvTranspose2dSoftmaxBiasScaleSigmoid(nn.Module):
    """KernelBench level 2 #91 as one fused kernel: ConvTranspose2d -> softmax(dim=1) -> + bias -> * scaling_factor
    -> sigmoid. Same constructor, submodules, parameters and state_dict keys as the original Model."""

    math = "default"  # convfuse math mode: "default" (PyTorch-like TF32), "tf32" or "strict"

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, bias_shape,
                 scaling_factor):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, output_padding=output_padding)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scaling_factor = scaling_factor

    def forward(self, x):
        return convt_softmax_bias_scale_sigmoid_block(x, self.conv_transpose, self.bias, self.scaling_factor,
                                                      self.math)


# --------------------------------------------------------------------------------------------------------------
# KernelBench 2/73: Conv2d -> BatchNorm2d -> * scaling_factor.

_B73 = "Conv2d+BatchNorm2d+scale"


def _eager_73(x, conv, bn, scaling_factor):
    return bn(conv(x)) * scaling_factor


def _bn_plan(bn):
    """nn.BatchNorm2d.forward's choices: (bn_training, running_mean, running_var, num_batches_tracked, momentum),
    or a string saying why the fused op cannot express them."""
    if not isinstance(bn, nn.BatchNorm2d):
        return f"bn is {type(bn).__name__} (fused: nn.BatchNorm2d)"
    training = bn.training
    use_buffers = not training or bn.track_running_stats
    rm = bn.running_mean if use_buffers else None
    rv = bn.running_var if use_buffers else None
    if (rm is None) != (rv is None):
        return "only one of running_mean/running_var is set"
    bn_training = training or rm is None
    nbt = None
    momentum = bn.momentum
    if training and bn.track_running_stats and rm is not None:
        nbt = bn.num_batches_tracked
        if momentum is None and nbt is None:
            return "momentum=None without num_batches_tracked"
    if not bn_training:
        momentum = 0.0  # unused in inference
    for name, t in (("running_mean", rm), ("running_var", rv)):
        if t is not None and (t.dtype != torch.float32 or not t.is_contiguous()):
            return f"bn.{name} is not a contiguous float32 tensor"
    if nbt is not None and (nbt.dtype != torch.int64 or nbt.numel() != 1):
        return "bn.num_batches_tracked is not a one-element int64 tensor"
    if momentum is not None and not isinstance(momentum, numbers.Real):
        return f"bn.momentum of type {type(momentum).__name__}"
    return bn_training, rm, rv, nbt, momentum


def _config_reason_73(conv, bn, scaling_factor):
    if isinstance(scaling_factor, bool) or not isinstance(scaling_factor, numbers.Real):
        return f"scaling_factor of type {type(scaling_factor).__name__} (fused: a Python number)"
    if conv.groups != 1 or conv.padding_mode != "zeros":
        return f"groups={conv.groups}, padding_mode={conv.padding_mode!r} (fused: groups=1, zeros)"
    if not all(_plain_pair(v) for v in (conv.stride, conv.padding, conv.dilation)):
        return f"padding={conv.padding!r} (fused: integer padding)"
    if isinstance(bn, nn.BatchNorm2d) and bn.num_features != conv.out_channels:
        return f"bn.num_features={bn.num_features} != conv.out_channels={conv.out_channels}"
    return None


def conv_bn_scale_block(x, conv, bn, scaling_factor, math="default"):
    """bn(conv(x)) * scaling_factor as one fused call, with nn.BatchNorm2d's train/eval behaviour (training: batch
    statistics, bn's running_mean/running_var/num_batches_tracked updated in place exactly as PyTorch does,
    momentum=None = cumulative average; eval: running statistics). PyTorch's ops when the fused path cannot serve."""
    if isinstance(x, torch.Tensor) and x.dim() == 3:
        raise ValueError(f"{_B73}: x: expected 4D input (got 3D input) (BatchNorm2d needs (N, C, H, W))")
    _check_input(x, conv.weight, conv.in_channels, _B73, "conv", (4,))
    params = (conv.weight, conv.bias, getattr(bn, "weight", None), getattr(bn, "bias", None))
    reason, detail = _common_reason(x, params)
    if reason is None:
        cfg = _config_reason_73(conv, bn, scaling_factor)
        if cfg is None:
            cfg = _bn_plan(bn)
        if isinstance(cfg, str):
            reason, detail = "module_config", cfg
        else:
            bn_training, rm, rv, nbt, momentum = cfg
    if reason is None:
        for t in (rm, rv, nbt):
            if t is not None and t.device != x.device:
                reason, detail = "device", f"bn buffers on {t.device}, input on {x.device}"
    if reason is None:
        oh = _out_size(x.shape[2], conv.kernel_size[0], conv.stride[0], conv.padding[0], conv.dilation[0])
        ow = _out_size(x.shape[3], conv.kernel_size[1], conv.stride[1], conv.padding[1], conv.dilation[1])
        _check_output_size(oh, ow, x, _B73)
        if bn_training and x.shape[0] * oh * ow <= 1:
            return _eager_73(x, conv, bn, scaling_factor)  # PyTorch raises "Expected more than 1 value per channel"
        layout = _layout(x)
        if layout == "channels_last":
            reason, detail = "channels_last", "channels_last input"
    if reason is None:
        if layout == "non_contiguous":
            _note_fallback("non_contiguous", _B73, f"non-contiguous input (strides {x.stride()})",
                           "running the fused kernel on a contiguous copy")
            x = x.contiguous()

        def call(xx):
            return _ops.CONV_BN_SCALE(
                xx, conv.weight, conv.bias, bn.weight, bn.bias, rm, rv, nbt, bn_training,
                None if momentum is None else float(momentum), float(bn.eps), float(scaling_factor),
                list(conv.stride), list(conv.padding), list(conv.dilation), math)

        y, reason, detail = _run_fused(call, x)
        if reason is None:
            return y
    _note_fallback(reason, _B73, detail, "running PyTorch's ops instead")
    return _eager_73(x, conv, bn, scaling_factor)


class Conv2dBatchNormScale(nn.Module):
    """KernelBench level 2 #73 as one fused kernel: Conv2d -> BatchNorm2d -> * scaling_factor, in train() (batch
    statistics, running buffers updated as nn.BatchNorm2d) and eval() (running statistics). Same constructor,
    submodules, parameters, buffers and state_dict keys as the original Model."""

    math = "default"  # convfuse math mode: "default" (PyTorch-like TF32, 3xTF32 for batch statistics), "tf32", "strict"

    def __init__(self, in_channels, out_channels, kernel_size, scaling_factor):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        return conv_bn_scale_block(x, self.conv, self.bn, self.scaling_factor, self.math)
