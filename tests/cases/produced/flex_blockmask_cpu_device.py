"""flex_attention on CUDA tensors with a BlockMask created on the CPU."""

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


mask = create_block_mask(causal, B=None, H=None, Q_LEN=256, KV_LEN=256, device="cpu")
q = torch.randn(1, 4, 256, 64, device="cuda", dtype=torch.bfloat16)
flex_attention(q, q, q, block_mask=mask)
