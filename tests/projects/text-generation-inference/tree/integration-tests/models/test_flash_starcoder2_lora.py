# trimmed from huggingface/text-generation-inference integration-tests/models/test_flash_starcoder2_lora.py at db931fcf42da: only the lines the project scan reads
        "bigcode/starcoder2-3b", lora_adapters=["smangrul/starcoder-3b-hugcoder"]
    response = await flash_starcoder2.generate(
