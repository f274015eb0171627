# trimmed from Lightning-AI/litgpt litgpt/api.py at 26857050fe3f: only the lines the project scan reads
        text = llm.generate("What do Llamas eat?", top_k=1)
