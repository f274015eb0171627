# trimmed from volcengine/verl verl/model_merger/megatron_model_merger.py at b178a3cd56f5: only the lines the project scan reads
        if "Qwen2MoeForCausalLM" in self.hf_config.architectures:
