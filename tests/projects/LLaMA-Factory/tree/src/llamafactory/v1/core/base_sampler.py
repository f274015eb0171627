# trimmed from hiyouga/LLaMA-Factory src/llamafactory/v1/core/base_sampler.py at ff6d4d12eeb0: only the lines the project scan reads
        async for token in self.engine.generate(messages, tools):
