"""SDPA restricted to the cuDNN backend with a head dimension of 512."""

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

q = torch.randn(1, 4, 128, 512, device="cuda", dtype=torch.float16)
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    F.scaled_dot_product_attention(q, q, q)
