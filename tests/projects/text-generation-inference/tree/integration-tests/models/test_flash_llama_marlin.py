# trimmed from huggingface/text-generation-inference integration-tests/models/test_flash_llama_marlin.py at db931fcf42da: only the lines the project scan reads
        "neuralmagic/llama-2-7b-chat-marlin", num_shard=2, quantize="marlin"
    response = await flash_llama_marlin.generate(
