# trimmed from hiyouga/LLaMA-Factory tests/data/test_template.py at ff6d4d12eeb0: only the lines the project scan reads
    tokenizer = AutoTokenizer.from_pretrained("Qwen/Qwen3-8B")
    _check_template("google/gemma-3-4b-it", "gemma", prompt_str, answer_str)
    _check_template("google/gemma-2-2b-it", "gemma2", prompt_str, answer_str)
    _check_template("meta-llama/Meta-Llama-3-8B-Instruct", "llama3", prompt_str, answer_str)
    _check_template("Qwen/Qwen2.5-7B-Instruct", "qwen", prompt_str, answer_str)
