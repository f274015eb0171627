# trimmed from huggingface/text-generation-inference integration-tests/models/test_flash_llama_fp8_kv_cache.py at db931fcf42da: only the lines the project scan reads
        "neuralmagic/Meta-Llama-3-8B-Instruct-FP8-KV",
    response = await flash_llama_fp8_kv_cache.generate(
