# trimmed from Lightning-AI/litgpt tests/test_tokenizer.py at 26857050fe3f: only the lines the project scan reads
    if config.name == "Mixtral-8x22B-v0.1":
