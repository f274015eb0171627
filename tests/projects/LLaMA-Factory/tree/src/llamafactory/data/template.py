# trimmed from hiyouga/LLaMA-Factory src/llamafactory/data/template.py at ff6d4d12eeb0: only the lines the project scan reads
    name="gemma2",
    name="gemma3",
