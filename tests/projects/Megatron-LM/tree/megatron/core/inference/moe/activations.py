# trimmed from NVIDIA/Megatron-LM megatron/core/inference/moe/activations.py at d98e8a64ddf3: only the lines the project scan reads
        MXFP8Tensor with .data [output_size, K] float8_e4m3fn and .scale (swizzled e8m0).
