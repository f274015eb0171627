# trimmed from NVIDIA/Megatron-LM megatron/core/utils.py at d98e8a64ddf3: only the lines the project scan reads
        import flash_attn as fa
