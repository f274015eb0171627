# trimmed from volcengine/verl tests/experimental/reward_loop/test_agent_reward_loop_colocate.py at b178a3cd56f5: only the lines the project scan reads
    rollout_model_path = os.path.expanduser("~/models/Qwen/Qwen2.5-0.5B-Instruct")
