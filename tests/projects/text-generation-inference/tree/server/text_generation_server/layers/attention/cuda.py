# trimmed from huggingface/text-generation-inference server/text_generation_server/layers/attention/cuda.py at db931fcf42da: only the lines the project scan reads
        kv_cache_dtype = "fp8" if kv_cache.dtype == torch.float8_e4m3fn else "auto"
