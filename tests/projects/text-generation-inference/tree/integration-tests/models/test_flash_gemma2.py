# trimmed from huggingface/text-generation-inference integration-tests/models/test_flash_gemma2.py at db931fcf42da: only the lines the project scan reads
    with launcher("google/gemma-2-9b-it", num_shard=2) as handle:
    response = await flash_gemma2.generate(
