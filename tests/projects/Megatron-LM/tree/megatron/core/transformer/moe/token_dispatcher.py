# trimmed from NVIDIA/Megatron-LM megatron/core/transformer/moe/token_dispatcher.py at d98e8a64ddf3: only the lines the project scan reads
        # Note: this needs to stay out of the torch.compile region because TE's ep_bootstrap does
