# trimmed from Lightning-AI/litgpt tests/generate/test_main.py at 26857050fe3f: only the lines the project scan reads
        out = generate.generate(model, input_idx, T + max_new_tokens, top_k=1)
