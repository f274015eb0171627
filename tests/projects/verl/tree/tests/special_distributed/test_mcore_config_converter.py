# trimmed from volcengine/verl tests/special_distributed/test_mcore_config_converter.py at b178a3cd56f5: only the lines the project scan reads
    "Qwen/Qwen2.5-7B",  # Qwen2 dense
    "Qwen/Qwen3-8B",  # Qwen3 dense
    "Qwen/Qwen2-57B-A14B",  # Qwen2 moe
    "Qwen/Qwen3-30B-A3B",  # Qwen3 moe
    # "mistralai/Mixtral-8x7B-v0.1",  # Mixtral # require authentication
