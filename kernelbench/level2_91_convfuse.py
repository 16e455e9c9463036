# KernelBench level 2 #91 (ConvTranspose2d -> softmax(dim=1) -> + bias -> * scaling_factor -> sigmoid), solved with
# convfuse: the whole chain is one fused kernel (torch.ops.convfuse.convt_softmax_bias_scale_sigmoid).
# Load it beside KernelBench/level2/91_ConvTranspose2d_Softmax_BiasAdd_Scaling_Sigmoid.py; needs only
# `pip install convfuse`. Same constructor, submodules and parameters as the original Model, built in the same order,
# so under one seed both hold bit-identical weights. Where the fused path can't serve (autograd, fp16/bf16,
# channels_last, a refused size) forward returns PyTorch's answer with a one-time convfuse.FallbackWarning.
import torch
import torch.nn as nn

import convfuse


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, bias_shape,
                 scaling_factor):
        super(ModelNew, self).__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, output_padding=output_padding)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scaling_factor = scaling_factor

    def forward(self, x):
        return convfuse.convt_softmax_bias_scale_sigmoid_block(x, self.conv_transpose, self.bias,
                                                               self.scaling_factor)
