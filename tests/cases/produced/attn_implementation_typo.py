"""An attn_implementation name that does not exist (a typo of flash_attention_2)."""

from transformers import LlamaConfig, LlamaForCausalLM

config = LlamaConfig(
    hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4, vocab_size=128
)
LlamaForCausalLM._from_config(config, attn_implementation="flash_attn_2")
