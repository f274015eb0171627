"""transformers 5.x asked for FlashAttention-2 where flash-attn is not installed."""

from transformers import LlamaConfig, LlamaForCausalLM

config = LlamaConfig(
    hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4, vocab_size=128
)
LlamaForCausalLM._from_config(config, attn_implementation="flash_attention_2")
