# trimmed from NVIDIA/Megatron-LM tests/unit_tests/transformer/test_utils.py at d98e8a64ddf3: only the lines the project scan reads
            window_size=(10, 0),
