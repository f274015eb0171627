# trimmed from huggingface/text-generation-inference integration-tests/models/test_llava_next.py at db931fcf42da: only the lines the project scan reads
        "llava-hf/llava-v1.6-mistral-7b-hf",
    response = await flash_llava_next.generate(
