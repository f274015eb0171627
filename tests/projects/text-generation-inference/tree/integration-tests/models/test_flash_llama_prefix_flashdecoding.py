# trimmed from huggingface/text-generation-inference integration-tests/models/test_flash_llama_prefix_flashdecoding.py at db931fcf42da: only the lines the project scan reads
        "meta-llama/Meta-Llama-3.1-8B-Instruct", num_shard=2, attention="flashdecoding"
