# trimmed from huggingface/text-generation-inference integration-tests/models/test_flash_llama_marlin_24.py at db931fcf42da: only the lines the project scan reads
        "nm-testing/Llama-2-7b-pruned2.4-Marlin_24", quantize="marlin"
    response = await flash_llama_marlin.generate(
