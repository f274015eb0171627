# trimmed from volcengine/verl tests/workers/rollout/rollout_vllm/run_fsdp_vllm.py at b178a3cd56f5: only the lines the project scan reads
    hdfs_path = "Qwen/Qwen2-7B-Instruct"
    output = actor_model.generate(
