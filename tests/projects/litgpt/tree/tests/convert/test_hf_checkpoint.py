# trimmed from Lightning-AI/litgpt tests/convert/test_hf_checkpoint.py at 26857050fe3f: only the lines the project scan reads
    config = Config.from_name("Llama-2-70b-hf")
