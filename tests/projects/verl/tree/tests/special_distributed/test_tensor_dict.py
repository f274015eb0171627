# trimmed from volcengine/verl tests/special_distributed/test_tensor_dict.py at b178a3cd56f5: only the lines the project scan reads
    output_entropy.backward(grad_output)
