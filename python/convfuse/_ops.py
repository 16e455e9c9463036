"""The two fused calls as torch.library custom ops, so torch.compile traces through them and CUDA graphs capture them.

    torch.ops.convfuse.convt_softmax_bias_scale_sigmoid(x, weight, conv_bias, bias, scale, stride, padding,
                                                       output_padding, dilation, math) -> Tensor
    torch.ops.convfuse.conv_bn_scale(x, weight, conv_bias, bn_weight, bn_bias, running_mean!, running_var!,
                                     num_batches_tracked!, training, momentum, eps, scale, stride, padding,
                                     dilation, math) -> Tensor                     (! = mutated in place)

One implementation serves every device: it is convfuse.conv_chain, which picks the C backend from the tensors'
device (CPU: the C reference backend; CUDA: the fused kernels on torch's current stream, output and workspace from
torch's caching allocator, no host sync). The fake (meta) implementation computes the output shape with PyTorch's
formula; it never touches the library.

torch < 2.4 has no torch.library.custom_op/register_fake: there `CONVT_SOFTMAX_BIAS_SCALE_SIGMOID` and
`CONV_BN_SCALE` are the plain Python implementations (eager works, torch.compile graph-breaks at them).
Forward only: no autograd formula is registered; the modules call these ops only when no gradient is needed.
"""

from typing import List, Optional

import torch

from . import conv_chain

_MIN_TORCH = (2, 4)


def _torch_version():
    parts = []
    for p in torch.__version__.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


HAS_CUSTOM_OPS = _torch_version() >= _MIN_TORCH and hasattr(torch.library, "custom_op")


def _out_size(size, k, s, p, d, op=0, transposed=False):
    if transposed:
        return (size - 1) * s - 2 * p + d * (k - 1) + op + 1
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


# --------------------------------------------------------------------------------------------------------------
# Real implementations (any device; conv_chain validates and raises with the argument's name).


def _convt_softmax_bias_scale_sigmoid(x: torch.Tensor, weight: torch.Tensor, conv_bias: Optional[torch.Tensor],
                                      bias: torch.Tensor, scale: float, stride: List[int], padding: List[int],
                                      output_padding: List[int], dilation: List[int], math: str) -> torch.Tensor:
    chain = [("softmax_channels",), ("add_channel", bias), ("mul_scalar", scale), ("sigmoid",)]
    return conv_chain(x, weight, conv_bias, chain, transposed=True, stride=tuple(stride), padding=tuple(padding),
                      output_padding=tuple(output_padding), dilation=tuple(dilation), math=math)


def _conv_bn_scale(x: torch.Tensor, weight: torch.Tensor, conv_bias: Optional[torch.Tensor],
                   bn_weight: Optional[torch.Tensor], bn_bias: Optional[torch.Tensor],
                   running_mean: Optional[torch.Tensor], running_var: Optional[torch.Tensor],
                   num_batches_tracked: Optional[torch.Tensor], training: bool, momentum: Optional[float], eps: float,
                   scale: float, stride: List[int], padding: List[int], dilation: List[int],
                   math: str) -> torch.Tensor:
    bn = {"training": training, "eps": eps, "momentum": momentum, "weight": bn_weight, "bias": bn_bias,
          "running_mean": running_mean, "running_var": running_var, "num_batches_tracked": num_batches_tracked}
    return conv_chain(x, weight, conv_bias, [("batch_norm", bn), ("mul_scalar", scale)], transposed=False,
                      stride=tuple(stride), padding=tuple(padding), dilation=tuple(dilation), math=math)


# --------------------------------------------------------------------------------------------------------------
# Fake implementations: shapes only. torch._check raises a clean error (not a crash) while tracing.


def _fake_checks(x, weight):
    torch._check(x.dim() == 4, lambda: f"x: expected a 4-D (N, C_in, H, W) tensor, got {x.dim()}-D")
    torch._check(weight.dim() == 4, lambda: f"weight: expected a 4-D tensor, got {weight.dim()}-D")
    torch._check(x.dtype == torch.float32, lambda: f"x: expected dtype torch.float32, got {x.dtype}")
    torch._check(weight.dtype == torch.float32, lambda: f"weight: expected dtype torch.float32, got {weight.dtype}")


def _fake_convt(x, weight, conv_bias, bias, scale, stride, padding, output_padding, dilation, math):
    _fake_checks(x, weight)
    torch._check(weight.shape[0] == x.shape[1], lambda: f"weight: expected shape ({x.shape[1]}, C_out, KH, KW), "
                                                        f"got {tuple(weight.shape)}")
    oh = _out_size(x.shape[2], weight.shape[2], stride[0], padding[0], dilation[0], output_padding[0], True)
    ow = _out_size(x.shape[3], weight.shape[3], stride[1], padding[1], dilation[1], output_padding[1], True)
    return x.new_empty((x.shape[0], weight.shape[1], oh, ow))


def _fake_conv_bn(x, weight, conv_bias, bn_weight, bn_bias, running_mean, running_var, num_batches_tracked, training,
                  momentum, eps, scale, stride, padding, dilation, math):
    _fake_checks(x, weight)
    torch._check(weight.shape[1] == x.shape[1], lambda: f"weight: expected shape (C_out, {x.shape[1]}, KH, KW), "
                                                        f"got {tuple(weight.shape)}")
    oh = _out_size(x.shape[2], weight.shape[2], stride[0], padding[0], dilation[0])
    ow = _out_size(x.shape[3], weight.shape[3], stride[1], padding[1], dilation[1])
    return x.new_empty((x.shape[0], weight.shape[0], oh, ow))


# --------------------------------------------------------------------------------------------------------------
# Registration (torch >= 2.4) or plain functions.

if HAS_CUSTOM_OPS:
    CONVT_SOFTMAX_BIAS_SCALE_SIGMOID = torch.library.custom_op(
        "convfuse::convt_softmax_bias_scale_sigmoid", mutates_args=())(_convt_softmax_bias_scale_sigmoid)
    CONV_BN_SCALE = torch.library.custom_op(
        "convfuse::conv_bn_scale", mutates_args=("running_mean", "running_var", "num_batches_tracked"))(_conv_bn_scale)
    CONVT_SOFTMAX_BIAS_SCALE_SIGMOID.register_fake(_fake_convt)
    CONV_BN_SCALE.register_fake(_fake_conv_bn)
else:
    CONVT_SOFTMAX_BIAS_SCALE_SIGMOID = _convt_softmax_bias_scale_sigmoid
    CONV_BN_SCALE = _conv_bn_scale

__all__ = ["CONVT_SOFTMAX_BIAS_SCALE_SIGMOID", "CONV_BN_SCALE", "HAS_CUSTOM_OPS"]
