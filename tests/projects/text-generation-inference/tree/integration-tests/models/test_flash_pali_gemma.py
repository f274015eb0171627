# trimmed from huggingface/text-generation-inference integration-tests/models/test_flash_pali_gemma.py at db931fcf42da: only the lines the project scan reads
    response = await flash_pali_gemma.generate(inputs, max_new_tokens=20)
