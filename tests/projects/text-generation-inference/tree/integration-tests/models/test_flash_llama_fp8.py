# trimmed from huggingface/text-generation-inference integration-tests/models/test_flash_llama_fp8.py at db931fcf42da: only the lines the project scan reads
    with launcher("meta-llama/Meta-Llama-3-8B", num_shard=2, quantize="fp8") as handle:
    response = await flash_llama_fp8.generate(
