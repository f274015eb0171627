# trimmed from huggingface/text-generation-inference integration-tests/models/test_mt0_base.py at db931fcf42da: only the lines the project scan reads
    response = await mt0_base.generate(
