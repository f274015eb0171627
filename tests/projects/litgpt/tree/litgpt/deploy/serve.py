# trimmed from Lightning-AI/litgpt litgpt/deploy/serve.py at 26857050fe3f: only the lines the project scan reads
        output = self.llm.generate(
