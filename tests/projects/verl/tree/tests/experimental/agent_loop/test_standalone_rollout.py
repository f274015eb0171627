# trimmed from volcengine/verl tests/experimental/agent_loop/test_standalone_rollout.py at b178a3cd56f5: only the lines the project scan reads
    config.actor_rollout_ref.model.path = os.path.expanduser("~/models/Qwen/Qwen2.5-1.5B-Instruct")
    model_path = os.path.expanduser("~/models/Qwen/Qwen3-30B-A3B-Instruct-2507")
