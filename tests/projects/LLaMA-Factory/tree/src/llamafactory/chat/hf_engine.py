# trimmed from hiyouga/LLaMA-Factory src/llamafactory/chat/hf_engine.py at ff6d4d12eeb0: only the lines the project scan reads
        self.tokenizer.padding_side = "left" if self.can_generate else "right"
        generate_output = model.generate(**gen_kwargs)
