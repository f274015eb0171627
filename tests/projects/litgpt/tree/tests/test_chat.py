# trimmed from Lightning-AI/litgpt tests/test_chat.py at 26857050fe3f: only the lines the project scan reads
    actual = chat.generate(model, input_idx, max_returned_tokens, stop_tokens=stop_tokens)
