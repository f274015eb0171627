# trimmed from volcengine/verl tests/utils/dataset/test_multiturn_sft_dataset_on_cpu.py at b178a3cd56f5: only the lines the project scan reads
        f"{custom_model_prefix}/Qwen/Qwen2.5-0.5B",
        f"{custom_model_prefix}/Qwen/Qwen3-30B-A3B-Instruct-2507",
