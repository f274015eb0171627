# trimmed from volcengine/verl scripts/converter_hf_to_mcore.py at b178a3cd56f5: only the lines the project scan reads
    for arch in ["DeepseekV3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM"]:
    if "Qwen2_5_VLForConditionalGeneration" in hf_config.architectures:
