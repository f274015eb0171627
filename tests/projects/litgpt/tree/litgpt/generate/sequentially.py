# trimmed from Lightning-AI/litgpt litgpt/generate/sequentially.py at 26857050fe3f: only the lines the project scan reads
        generate_base.next_token = torch.compile(generate_base.next_token)
        y = generate_base.generate(
