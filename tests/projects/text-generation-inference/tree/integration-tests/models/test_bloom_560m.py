# trimmed from huggingface/text-generation-inference integration-tests/models/test_bloom_560m.py at db931fcf42da: only the lines the project scan reads
    response = await bloom_560.generate(
