# trimmed from volcengine/verl verl/models/transformers/qwen2_vl.py at b178a3cd56f5: only the lines the project scan reads
    Qwen2VLAttention,
    from flash_attn import flash_attn_func, flash_attn_varlen_func
