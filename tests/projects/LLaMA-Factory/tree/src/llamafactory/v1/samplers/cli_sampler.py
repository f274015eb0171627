# trimmed from hiyouga/LLaMA-Factory src/llamafactory/v1/samplers/cli_sampler.py at ff6d4d12eeb0: only the lines the project scan reads
        generator = super().generate(messages, tools)
