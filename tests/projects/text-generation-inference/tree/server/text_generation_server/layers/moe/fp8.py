# trimmed from huggingface/text-generation-inference server/text_generation_server/layers/moe/fp8.py at db931fcf42da: only the lines the project scan reads
        if weight.weight.dtype in {torch.float8_e4m3fn, torch.float8_e4m3fnuz}:
