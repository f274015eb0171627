# trimmed from huggingface/text-generation-inference integration-tests/models/test_compressed_tensors_w8a8_int_dynamic_weight.py at db931fcf42da: only the lines the project scan reads
        "danieldk/Qwen2.5-1.5B-Instruct-w8a8-int-dynamic-weight",
    response = await compressed_tensors_w8a8_int_dynamic_weight.generate(
