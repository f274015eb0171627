# trimmed from huggingface/text-generation-inference backends/gaudi/server/text_generation_server/layers/attention/hpu.py at db931fcf42da: only the lines the project scan reads
            x, scale, False, False, torch.float8_e4m3fn
        padding_side="left",
