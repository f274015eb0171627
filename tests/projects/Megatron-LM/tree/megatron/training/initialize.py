# trimmed from NVIDIA/Megatron-LM megatron/training/initialize.py at d98e8a64ddf3: only the lines the project scan reads
        pass  # we're using torch.compile for jit fusion
