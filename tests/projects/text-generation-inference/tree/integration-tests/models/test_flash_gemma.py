# trimmed from huggingface/text-generation-inference integration-tests/models/test_flash_gemma.py at db931fcf42da: only the lines the project scan reads
    with launcher("google/gemma-2b", num_shard=1) as handle:
    response = await flash_gemma.generate(
