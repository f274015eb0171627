# trimmed from huggingface/text-generation-inference integration-tests/models/test_compressed_tensors_w8a8_int.py at db931fcf42da: only the lines the project scan reads
        "neuralmagic/Llama-3.2-3B-Instruct-quantized.w8a8",
    response = await compressed_tensors_w8a8_int.generate(
