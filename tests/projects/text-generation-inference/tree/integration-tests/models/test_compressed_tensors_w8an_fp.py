# trimmed from huggingface/text-generation-inference integration-tests/models/test_compressed_tensors_w8an_fp.py at db931fcf42da: only the lines the project scan reads
        "neuralmagic/Llama-3.2-1B-Instruct-FP8",
    response = await compressed_tensors_w8an.generate(
