# trimmed from Lightning-AI/litgpt litgpt/adapter.py at 26857050fe3f: only the lines the project scan reads
    def scaled_dot_product_attention(
