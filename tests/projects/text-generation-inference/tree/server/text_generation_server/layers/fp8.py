# trimmed from huggingface/text-generation-inference server/text_generation_server/layers/fp8.py at db931fcf42da: only the lines the project scan reads
    torch.float8_e4m3fnuz if SYSTEM == "rocm" else torch.float8_e4m3fn
