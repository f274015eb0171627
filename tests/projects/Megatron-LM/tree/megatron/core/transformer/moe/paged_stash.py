# trimmed from NVIDIA/Megatron-LM megatron/core/transformer/moe/paged_stash.py at d98e8a64ddf3: only the lines the project scan reads
                torch.uint8 if dtype in [torch.float8_e4m3fn, torch.float8_e8m0fnu] else dtype
