# trimmed from Lightning-AI/litgpt litgpt/generate/base.py at 26857050fe3f: only the lines the project scan reads
    # TODO: This check (and the one in generate_fn) is not sufficient. We do the proper checks in LLM.generate().
        next_token = torch.compile(next_token, mode="reduce-overhead")
