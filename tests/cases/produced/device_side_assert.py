"""An embedding lookup past the vocabulary: a device-side assert, reported asynchronously."""

import torch

embedding = torch.nn.Embedding(128, 64).cuda()
ids = torch.tensor([[1, 2, 500]], device="cuda")
out = embedding(ids)
print(out.sum().item())
