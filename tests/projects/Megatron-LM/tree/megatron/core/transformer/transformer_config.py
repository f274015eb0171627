# trimmed from NVIDIA/Megatron-LM megatron/core/transformer/transformer_config.py at d98e8a64ddf3: only the lines the project scan reads
                    "which is needed in core_attn.backward()."
