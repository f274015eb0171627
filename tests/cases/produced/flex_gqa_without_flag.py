"""flex_attention with 8 query heads and 2 key/value heads, without enable_gqa=True."""

import torch
from torch.nn.attention.flex_attention import flex_attention

q = torch.randn(1, 8, 128, 64, device="cuda", dtype=torch.bfloat16)
k = torch.randn(1, 2, 128, 64, device="cuda", dtype=torch.bfloat16)
flex_attention(q, k, k)
