"""SDPA with enable_gqa=True, but 6 query heads over 4 key/value heads (not a multiple)."""

import torch
import torch.nn.functional as F

q = torch.randn(1, 6, 16, 64, device="cuda", dtype=torch.bfloat16)
k = torch.randn(1, 4, 16, 64, device="cuda", dtype=torch.bfloat16)
F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
