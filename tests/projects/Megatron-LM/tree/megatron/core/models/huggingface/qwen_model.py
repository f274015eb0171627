# trimmed from NVIDIA/Megatron-LM megatron/core/models/huggingface/qwen_model.py at d98e8a64ddf3: only the lines the project scan reads
    from transformers.models.qwen2 import Qwen2ForCausalLM
