# trimmed from volcengine/verl tests/experimental/reward_loop/reward_fn.py at b178a3cd56f5: only the lines the project scan reads
    model_name = os.path.expanduser("~/models/Qwen/Qwen2.5-1.5B-Instruct")
