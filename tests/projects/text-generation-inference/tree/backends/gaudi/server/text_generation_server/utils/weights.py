# trimmed from huggingface/text-generation-inference backends/gaudi/server/text_generation_server/utils/weights.py at db931fcf42da: only the lines the project scan reads
        # as well. FP8 uses torch.float8_e4m3fn
