# trimmed from Lightning-AI/litgpt tests/ext_thunder/test_unsloth_executor.py at 26857050fe3f: only the lines the project scan reads
    config = Config.from_name("Llama-2-7b-hf")
