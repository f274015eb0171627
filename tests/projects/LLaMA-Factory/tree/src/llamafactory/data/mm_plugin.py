# trimmed from hiyouga/LLaMA-Factory src/llamafactory/data/mm_plugin.py at ff6d4d12eeb0: only the lines the project scan reads
    r"""Get gemma3 token type ids for computing loss.
