# trimmed from NVIDIA/Megatron-LM megatron/core/inference/quantization/mxfp8_tensor.py at d98e8a64ddf3: only the lines the project scan reads
    if tensor.data.dtype != torch.float8_e4m3fn:
