# trimmed from huggingface/text-generation-inference server/text_generation_server/layers/attention/ipex.py at db931fcf42da: only the lines the project scan reads
    if kv_cache.key.dtype == torch.float8_e4m3fn:
        ipex.llm.modules.PagedAttention.flash_attn_varlen_func(
