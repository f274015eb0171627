"""SDPA restricted to the flash backend on float32 inputs: no kernel can run it."""

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

q = torch.randn(1, 4, 16, 64, device="cuda", dtype=torch.float32)
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    F.scaled_dot_product_attention(q, q, q)
