"""transformers 5.x asked for a Hub kernel (kernels-community/flash-attn), no kernels package, no network."""

from transformers import LlamaConfig, LlamaForCausalLM

config = LlamaConfig(
    hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4, vocab_size=128
)
LlamaForCausalLM._from_config(config, attn_implementation="kernels-community/flash-attn")
