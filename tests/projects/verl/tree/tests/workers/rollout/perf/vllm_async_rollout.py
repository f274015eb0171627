# trimmed from volcengine/verl tests/workers/rollout/perf/vllm_async_rollout.py at b178a3cd56f5: only the lines the project scan reads
    config.actor_rollout_ref.model.path = "Qwen/Qwen2.5-7B-Instruct"
