# trimmed from volcengine/verl verl/utils/megatron_utils.py at b178a3cd56f5: only the lines the project scan reads
    qkv_bias = True if "Qwen2ForCausalLM" in hf_config.architectures else getattr(hf_config, "attention_bias", False)
