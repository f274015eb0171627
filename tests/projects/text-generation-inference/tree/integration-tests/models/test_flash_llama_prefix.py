# trimmed from huggingface/text-generation-inference integration-tests/models/test_flash_llama_prefix.py at db931fcf42da: only the lines the project scan reads
    with launcher("meta-llama/Meta-Llama-3.1-8B-Instruct", num_shard=2) as handle:
