# trimmed from hiyouga/LLaMA-Factory src/llamafactory/chat/vllm_engine.py at ff6d4d12eeb0: only the lines the project scan reads
        self.tokenizer.padding_side = "left"
        result_generator = self.model.generate(
