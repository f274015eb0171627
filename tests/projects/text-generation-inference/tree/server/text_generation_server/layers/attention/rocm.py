# trimmed from huggingface/text-generation-inference server/text_generation_server/layers/attention/rocm.py at db931fcf42da: only the lines the project scan reads
    if kv_cache.dtype == torch.float8_e4m3fn:
