# trimmed from Lightning-AI/litgpt tests/test_generate_speculatively.py at 26857050fe3f: only the lines the project scan reads
    out, acceptance_rate = generate.generate(
