# trimmed from huggingface/text-generation-inference integration-tests/models/test_flash_awq.py at db931fcf42da: only the lines the project scan reads
        "abhinavkulkarni/codellama-CodeLlama-7b-Python-hf-w4-g128-awq",
    response = await flash_llama_awq.generate(
