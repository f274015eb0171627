# trimmed from OpenRLHF/OpenRLHF openrlhf/trainer/ray/vllm_engine.py at 3c3be6234e0c: only the lines the project scan reads
        generator = self.llm.generate(
