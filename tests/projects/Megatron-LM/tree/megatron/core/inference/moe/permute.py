# trimmed from NVIDIA/Megatron-LM megatron/core/inference/moe/permute.py at d98e8a64ddf3: only the lines the project scan reads
    out_fp8 = torch.empty(output_size, K, dtype=torch.float8_e4m3fn, device=hidden_states.device)
