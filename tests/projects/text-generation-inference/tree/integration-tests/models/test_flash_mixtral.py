# trimmed from huggingface/text-generation-inference integration-tests/models/test_flash_mixtral.py at db931fcf42da: only the lines the project scan reads
    with launcher("mistralai/Mixtral-8x7B-v0.1", num_shard=8) as handle:
    response = await flash_mixtral.generate(
