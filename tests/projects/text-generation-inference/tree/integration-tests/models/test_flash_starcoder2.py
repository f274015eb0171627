# trimmed from huggingface/text-generation-inference integration-tests/models/test_flash_starcoder2.py at db931fcf42da: only the lines the project scan reads
    with launcher("bigcode/starcoder2-3b", num_shard=2) as handle:
    response = await flash_starcoder2.generate(
