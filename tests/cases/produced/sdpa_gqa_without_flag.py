"""SDPA with 8 query heads and 2 key/value heads, without enable_gqa=True."""

import torch
import torch.nn.functional as F

q = torch.randn(1, 8, 16, 64, device="cuda", dtype=torch.bfloat16)
k = torch.randn(1, 2, 16, 64, device="cuda", dtype=torch.bfloat16)
F.scaled_dot_product_attention(q, k, k)
