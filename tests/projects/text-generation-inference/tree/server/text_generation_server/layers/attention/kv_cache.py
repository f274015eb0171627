# trimmed from huggingface/text-generation-inference server/text_generation_server/layers/attention/kv_cache.py at db931fcf42da: only the lines the project scan reads
        if dtype in {torch.float8_e5m2, torch.float8_e4m3fn}:
