"""flex_attention with a BlockMask built for 256 tokens, called on 512."""

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


mask = create_block_mask(causal, B=None, H=None, Q_LEN=256, KV_LEN=256, device="cuda")
q = torch.randn(1, 4, 512, 64, device="cuda", dtype=torch.bfloat16)
torch.compile(flex_attention)(q, q, q, block_mask=mask)
