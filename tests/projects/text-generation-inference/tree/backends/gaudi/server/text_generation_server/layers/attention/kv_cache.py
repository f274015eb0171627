# trimmed from huggingface/text-generation-inference backends/gaudi/server/text_generation_server/layers/attention/kv_cache.py at db931fcf42da: only the lines the project scan reads
        if self.kv_cache.dtype == torch.float8_e4m3fn:
