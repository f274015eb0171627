# trimmed from NVIDIA/Megatron-LM megatron/core/tensor_parallel/random.py at d98e8a64ddf3: only the lines the project scan reads
                "please use .backward() if possible"
