# trimmed from NVIDIA/Megatron-LM megatron/core/models/audio/nemo_transformer_encoder.py at d98e8a64ddf3: only the lines the project scan reads
        from flash_attn import flash_attn_func as _impl
        output = scaled_dot_product_attention(
            queries, keys, values, attn_mask=attn_mask, is_causal=is_causal, dropout_p=dropout
