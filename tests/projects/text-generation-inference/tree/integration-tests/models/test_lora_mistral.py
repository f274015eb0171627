# trimmed from huggingface/text-generation-inference integration-tests/models/test_lora_mistral.py at db931fcf42da: only the lines the project scan reads
        "mistralai/Mistral-7B-v0.1",
    response = await lora_mistral.generate(
