"""An attention score matrix too large for the GPU (eager attention on a long sequence)."""

import torch

q = torch.randn(8, 32, 65536, 128, device="cuda", dtype=torch.bfloat16)
scores = q @ q.transpose(-1, -2)
