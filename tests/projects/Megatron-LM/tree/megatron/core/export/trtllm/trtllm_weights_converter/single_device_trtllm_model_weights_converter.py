# trimmed from NVIDIA/Megatron-LM megatron/core/export/trtllm/trtllm_weights_converter/single_device_trtllm_model_weights_converter.py at d98e8a64ddf3: only the lines the project scan reads
            storage = torch.float8_e4m3fn
