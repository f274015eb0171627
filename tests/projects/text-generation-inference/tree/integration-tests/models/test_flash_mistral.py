# trimmed from huggingface/text-generation-inference integration-tests/models/test_flash_mistral.py at db931fcf42da: only the lines the project scan reads
    with launcher("mistralai/Mistral-7B-Instruct-v0.1") as handle:
    response = await flash_mistral.generate(
