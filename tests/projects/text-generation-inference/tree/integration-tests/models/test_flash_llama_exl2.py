# trimmed from huggingface/text-generation-inference integration-tests/models/test_flash_llama_exl2.py at db931fcf42da: only the lines the project scan reads
        "turboderp/Llama-3-8B-Instruct-exl2",
    response = await flash_llama_exl2.generate(
