"""SDPA with an attention mask whose shape does not broadcast to the scores."""

import torch
import torch.nn.functional as F

q = torch.randn(2, 4, 16, 64, device="cuda", dtype=torch.bfloat16)
mask = torch.ones(2, 1, 16, 17, device="cuda", dtype=torch.bool)
F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
