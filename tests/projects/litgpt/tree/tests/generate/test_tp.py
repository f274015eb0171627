# trimmed from Lightning-AI/litgpt tests/generate/test_tp.py at 26857050fe3f: only the lines the project scan reads
            "Llama-2-70b-hf",
            "Mixtral-8x7B-v0.1",
