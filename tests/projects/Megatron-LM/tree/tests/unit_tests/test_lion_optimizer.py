# trimmed from NVIDIA/Megatron-LM tests/unit_tests/test_lion_optimizer.py at d98e8a64ddf3: only the lines the project scan reads
            loss_standalone.backward()
