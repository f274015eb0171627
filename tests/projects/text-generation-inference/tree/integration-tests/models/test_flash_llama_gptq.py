# trimmed from huggingface/text-generation-inference integration-tests/models/test_flash_llama_gptq.py at db931fcf42da: only the lines the project scan reads
        "astronomer/Llama-3-8B-Instruct-GPTQ-4-Bit", num_shard=2, quantize="gptq"
    response = await flash_llama_gptq.generate(
