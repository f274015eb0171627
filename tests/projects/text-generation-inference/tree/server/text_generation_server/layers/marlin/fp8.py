# trimmed from huggingface/text-generation-inference server/text_generation_server/layers/marlin/fp8.py at db931fcf42da: only the lines the project scan reads
    assert fp8_tensor.dtype == torch.float8_e4m3fn
