"""SDPA with a float16 query and float32 keys and values."""

import torch
import torch.nn.functional as F

q = torch.randn(1, 4, 16, 64, device="cuda", dtype=torch.float16)
k = torch.randn(1, 4, 16, 64, device="cuda", dtype=torch.float32)
F.scaled_dot_product_attention(q, k, k)
