"""A sdpa model asked for output_attentions, which transformers 5.x cannot give from sdpa."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

config = LlamaConfig(
    hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4, vocab_size=128
)
model = LlamaForCausalLM._from_config(config, attn_implementation="sdpa").cuda()
ids = torch.tensor([[1, 2, 3, 4]], device="cuda")
model(ids, output_attentions=True)
