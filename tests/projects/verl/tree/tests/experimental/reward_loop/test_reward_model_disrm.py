# trimmed from volcengine/verl tests/experimental/reward_loop/test_reward_model_disrm.py at b178a3cd56f5: only the lines the project scan reads
    rollout_model_name = os.path.expanduser("~/models/Qwen/Qwen2.5-1.5B-Instruct")
    reward_model_name = os.path.expanduser("~/models/Skywork/Skywork-Reward-V2-Llama-3.2-1B")
