# trimmed from huggingface/text-generation-inference integration-tests/models/test_flash_pali_gemma2.py at db931fcf42da: only the lines the project scan reads
        "google/paligemma2-3b-pt-224",
    response = await flash_pali_gemma.generate(
