# trimmed from volcengine/verl tests/workers/rollout/test_hf_rollout.py at b178a3cd56f5: only the lines the project scan reads
    hdfs_path = "Qwen/Qwen2-7B-Instruct"
    tokenizer = AutoTokenizer.from_pretrained(local_model_path, padding_side="left", trust_remote_code=True)
