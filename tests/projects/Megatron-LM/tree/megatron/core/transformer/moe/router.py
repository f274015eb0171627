# trimmed from NVIDIA/Megatron-LM megatron/core/transformer/moe/router.py at d98e8a64ddf3: only the lines the project scan reads
    method is @torch.compile()'d and returns dense [num_tokens, topk] tensors
