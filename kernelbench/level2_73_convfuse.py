# KernelBench level 2 #73 (Conv2d -> BatchNorm2d -> * scaling_factor), solved with convfuse: one fused kernel
# (torch.ops.convfuse.conv_bn_scale) in train() (batch statistics; self.bn's running_mean, running_var and
# num_batches_tracked updated in place exactly as nn.BatchNorm2d does) and in eval() (running statistics).
# Load it beside KernelBench/level2/73_Conv2d_BatchNorm_Scaling.py; needs only `pip install convfuse`. Same
# constructor, submodules, parameters and buffers as the original Model, built in the same order, so under one seed
# both hold bit-identical weights. Where the fused path can't serve (autograd, fp16/bf16, channels_last, a refused
# size) forward returns PyTorch's answer with a one-time convfuse.FallbackWarning.
import torch
import torch.nn as nn

import convfuse


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scaling_factor):
        super(ModelNew, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        return convfuse.conv_bn_scale_block(x, self.conv, self.bn, self.scaling_factor)
