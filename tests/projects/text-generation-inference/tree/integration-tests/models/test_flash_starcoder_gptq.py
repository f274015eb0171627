# trimmed from huggingface/text-generation-inference integration-tests/models/test_flash_starcoder_gptq.py at db931fcf42da: only the lines the project scan reads
    response = await flash_starcoder_gptq.generate(
