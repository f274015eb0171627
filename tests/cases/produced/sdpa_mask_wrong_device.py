"""SDPA on CUDA tensors with an attention mask left on the CPU."""

import torch
import torch.nn.functional as F

q = torch.randn(2, 4, 16, 64, device="cuda", dtype=torch.float16)
mask = torch.ones(16, 16, dtype=torch.bool).tril()
F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
