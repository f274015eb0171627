# trimmed from NVIDIA/Megatron-LM tools/checkpoint/loader_mixtral_hf.py at d98e8a64ddf3: only the lines the project scan reads
    from transformers import MixtralConfig
