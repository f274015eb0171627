# trimmed from NVIDIA/Megatron-LM megatron/core/models/common/embeddings/rope_utils.py at d98e8a64ddf3: only the lines the project scan reads
    from flash_attn.layers.rotary import apply_rotary_emb as apply_rotary_emb_flash
