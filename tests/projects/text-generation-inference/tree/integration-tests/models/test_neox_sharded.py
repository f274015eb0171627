# trimmed from huggingface/text-generation-inference integration-tests/models/test_neox_sharded.py at db931fcf42da: only the lines the project scan reads
    response = await neox_sharded.generate(
