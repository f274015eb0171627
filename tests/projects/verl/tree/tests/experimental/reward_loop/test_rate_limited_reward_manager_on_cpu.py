# trimmed from volcengine/verl tests/experimental/reward_loop/test_rate_limited_reward_manager_on_cpu.py at b178a3cd56f5: only the lines the project scan reads
        return AutoTokenizer.from_pretrained(os.path.expanduser("~/models/Qwen/Qwen2.5-0.5B-Instruct"))
