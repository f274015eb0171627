# trimmed from huggingface/text-generation-inference integration-tests/models/test_mpt.py at db931fcf42da: only the lines the project scan reads
    response = await mpt_sharded.generate(
