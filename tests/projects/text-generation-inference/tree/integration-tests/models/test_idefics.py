# trimmed from huggingface/text-generation-inference integration-tests/models/test_idefics.py at db931fcf42da: only the lines the project scan reads
    response = await idefics.generate(
