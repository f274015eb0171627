# trimmed from huggingface/text-generation-inference integration-tests/models/test_compressed_tensors_wna16_int.py at db931fcf42da: only the lines the project scan reads
        "neuralmagic/gemma-2-2b-it-quantized.w4a16",
    response = await compressed_tensors_wna16.generate(
