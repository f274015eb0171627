# trimmed from volcengine/verl tests/workers/rollout/test_sglang_async_rollout_multimodal_delta.py at b178a3cd56f5: only the lines the project scan reads
    hf_processor(os.path.expanduser("~/models/Qwen/Qwen2.5-VL-3B-Instruct")) is None,
