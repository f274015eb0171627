# trimmed from Lightning-AI/litgpt tests/test_prompts.py at 26857050fe3f: only the lines the project scan reads
        "Llama-2-7b-chat-hf",
        "Gemma-2b-it",
        "Phi-3-mini-4k-instruct",
        "Mistral-7B-Instruct-v0.1",
