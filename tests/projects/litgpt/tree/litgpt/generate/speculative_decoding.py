# trimmed from Lightning-AI/litgpt litgpt/generate/speculative_decoding.py at 26857050fe3f: only the lines the project scan reads
        next_token = torch.compile(next_token, mode="reduce-overhead")
