# trimmed from axolotl-ai-cloud/axolotl tests/conftest.py at 067b021c8b87: only the lines the project scan reads
    snapshot_download_w_retry("Qwen/Qwen3-0.6B", repo_type="model")
    snapshot_download_w_retry("axolotl-ai-co/tiny-gemma2-137m", repo_type="model")
        "axolotl-ai-co/Llama-3.3-70B-Instruct-tokenizer",
        "microsoft/Phi-3.5-mini-instruct",
        "casperhansen/mistral-7b-instruct-v0.1-awq",
        "mlx-community/gemma-3-4b-it-8bit",
        "unsloth/gemma-2b-it",
    ("transformers.models.llama.modeling_llama", ("LlamaAttention", "forward")),
