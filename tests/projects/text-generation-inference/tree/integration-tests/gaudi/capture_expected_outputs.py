# trimmed from huggingface/text-generation-inference integration-tests/gaudi/capture_expected_outputs.py at db931fcf42da: only the lines the project scan reads
    response = await client.generate(
