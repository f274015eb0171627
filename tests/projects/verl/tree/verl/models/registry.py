# trimmed from volcengine/verl verl/models/registry.py at b178a3cd56f5: only the lines the project scan reads
    "LlamaForCausalLM": (
    "Qwen2ForCausalLM": (
    "MistralForCausalLM": (
