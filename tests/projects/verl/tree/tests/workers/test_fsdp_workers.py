# trimmed from volcengine/verl tests/workers/test_fsdp_workers.py at b178a3cd56f5: only the lines the project scan reads
    actor_model_path = os.path.expanduser("~/models/Qwen/Qwen2.5-0.5B-Instruct")
