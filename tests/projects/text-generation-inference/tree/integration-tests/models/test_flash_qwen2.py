# trimmed from huggingface/text-generation-inference integration-tests/models/test_flash_qwen2.py at db931fcf42da: only the lines the project scan reads
    with launcher("Qwen/Qwen1.5-0.5B") as handle:
    response = await flash_qwen2.generate(
