# trimmed from NVIDIA/Megatron-LM megatron/core/transformer/attention.py at d98e8a64ddf3: only the lines the project scan reads
    from flash_attn_3.flash_attn_interface import _flash_attn_forward

    from flash_attn.cute import flash_attn_varlen_func as flash_attn4_varlen_func
