# trimmed from NVIDIA/Megatron-LM tests/functional_tests/test_cases/common/moe_perf/__main__.py at d98e8a64ddf3: only the lines the project scan reads
            output.backward(backward_grad)
