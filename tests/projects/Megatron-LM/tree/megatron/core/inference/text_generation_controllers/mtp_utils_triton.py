# trimmed from NVIDIA/Megatron-LM megatron/core/inference/text_generation_controllers/mtp_utils_triton.py at d98e8a64ddf3: only the lines the project scan reads
        torch.compile'd `_rewind_kv_cache` (KV-cache portion only; Mamba
