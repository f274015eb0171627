# trimmed from NVIDIA/Megatron-LM megatron/core/transformer/hyper_connection.py at d98e8a64ddf3: only the lines the project scan reads
    @torch.compile
