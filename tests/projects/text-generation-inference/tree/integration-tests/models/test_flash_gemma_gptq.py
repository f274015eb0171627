# trimmed from huggingface/text-generation-inference integration-tests/models/test_flash_gemma_gptq.py at db931fcf42da: only the lines the project scan reads
    with launcher("TechxGenus/gemma-2b-GPTQ", num_shard=1, quantize="gptq") as handle:
    response = await flash_gemma_gptq.generate(
