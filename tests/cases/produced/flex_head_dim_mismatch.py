"""flex_attention with query and key head dimensions that differ."""

import torch
from torch.nn.attention.flex_attention import flex_attention

q = torch.randn(1, 4, 128, 64, device="cuda", dtype=torch.bfloat16)
k = torch.randn(1, 4, 128, 32, device="cuda", dtype=torch.bfloat16)
torch.compile(flex_attention)(q, k, k)
