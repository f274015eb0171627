# trimmed from hiyouga/LLaMA-Factory tests/train/megatron_bridge/test_model_support.py at ff6d4d12eeb0: only the lines the project scan reads
    "gemma2",
    "gemma3",
