# trimmed from NVIDIA/Megatron-LM megatron/core/inference/quantization/utils.py at d98e8a64ddf3: only the lines the project scan reads
    fi_data_e4m3 = fi_data_bytes.view(torch.float8_e4m3fn).float()
