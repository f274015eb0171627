# trimmed from volcengine/verl tests/experimental/agent_loop/test_basic_agent_loop.py at b178a3cd56f5: only the lines the project scan reads
    model_path = os.path.expanduser("~/models/Qwen/Qwen2.5-1.5B-Instruct")
