# trimmed from hiyouga/LLaMA-Factory tests/data/test_mm_plugin.py at ff6d4d12eeb0: only the lines the project scan reads
    tokenizer_module = _load_tokenizer_module(model_name_or_path="google/gemma-3-4b-it")
    tokenizer_module = _load_tokenizer_module(model_name_or_path="Qwen/Qwen2.5-Omni-7B")
    tokenizer_module = _load_tokenizer_module(model_name_or_path="Qwen/Qwen2-VL-7B-Instruct")
