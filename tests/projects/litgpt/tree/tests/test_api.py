# trimmed from Lightning-AI/litgpt tests/test_api.py at 26857050fe3f: only the lines the project scan reads
    output = mock_llm.generate(prompt, max_new_tokens=10, temperature=0.8, top_k=5)
