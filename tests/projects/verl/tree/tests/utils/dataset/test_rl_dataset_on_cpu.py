# trimmed from volcengine/verl tests/utils/dataset/test_rl_dataset_on_cpu.py at b178a3cd56f5: only the lines the project scan reads
    tokenizer = hf_tokenizer(os.path.expanduser("~/models/Qwen/Qwen2-VL-2B-Instruct"))
