# trimmed from NVIDIA/Megatron-LM megatron/core/inference/quantization/mxfp8_quantize.py at d98e8a64ddf3: only the lines the project scan reads
    # data: [M, K] float8_e4m3fn
