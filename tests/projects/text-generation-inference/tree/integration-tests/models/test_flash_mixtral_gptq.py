# trimmed from huggingface/text-generation-inference integration-tests/models/test_flash_mixtral_gptq.py at db931fcf42da: only the lines the project scan reads
        "TheBloke/Mixtral-8x7B-Instruct-v0.1-GPTQ",
    response = await flash_mixtral_gptq.generate(
