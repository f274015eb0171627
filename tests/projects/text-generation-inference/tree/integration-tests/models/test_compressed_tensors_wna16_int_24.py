# trimmed from huggingface/text-generation-inference integration-tests/models/test_compressed_tensors_wna16_int_24.py at db931fcf42da: only the lines the project scan reads
        "danieldk/Llama-3.1-8B-w4a16-int-24",
    response = await compressed_tensors_wna16_int_24.generate(
