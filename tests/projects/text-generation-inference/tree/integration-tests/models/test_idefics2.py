# trimmed from huggingface/text-generation-inference integration-tests/models/test_idefics2.py at db931fcf42da: only the lines the project scan reads
    response = await flash_idefics2_next.generate(
