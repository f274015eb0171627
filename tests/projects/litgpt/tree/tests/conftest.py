# trimmed from Lightning-AI/litgpt tests/conftest.py at 26857050fe3f: only the lines the project scan reads
        if "test_hf_for_nemo" in test.nodeid and "Qwen/Qwen2.5-7B-Instruct" in test.nodeid:
