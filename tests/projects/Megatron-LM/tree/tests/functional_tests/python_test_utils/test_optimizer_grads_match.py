# trimmed from NVIDIA/Megatron-LM tests/functional_tests/python_test_utils/test_optimizer_grads_match.py at d98e8a64ddf3: only the lines the project scan reads
    if hasattr(torch, "float8_e4m3fn") and dtype in (
