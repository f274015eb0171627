# trimmed from NVIDIA/Megatron-LM megatron/core/fusions/fused_bias_geglu.py at d98e8a64ddf3: only the lines the project scan reads
        input_for_backward = input.to(torch.float8_e4m3fn) if fp8_input_store else input
