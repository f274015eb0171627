# trimmed from volcengine/verl tests/workers/rollout/rollout_vllm/test_vllm_abort.py at b178a3cd56f5: only the lines the project scan reads
    MODEL_PATH = os.path.expanduser("~/models/Qwen/Qwen2.5-1.5B-Instruct")  # /root/models/Qwen/Qwen2.5-1.5B-Instruct
