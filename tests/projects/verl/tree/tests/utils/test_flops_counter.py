# trimmed from volcengine/verl tests/utils/test_flops_counter.py at b178a3cd56f5: only the lines the project scan reads
            "model_type": "llama",
        "config": {  # Qwen/Qwen2.5-7B-Instruct
            "model_type": "qwen2",
        "config": {  # Qwen/Qwen3-8B
            "model_type": "qwen3",
        "config": {  # Qwen/Qwen3-30B-A3B-Base
            "model_type": "qwen3_moe",
        "config": {  # mistralai/Mistral-Small-24B-Instruct-2501
            "model_type": "mistral",
        "config": {  # Gemma3-12B-IT-TextOnly
            "model_type": "gemma3_text",
            "head_dim": 256,
            "sliding_window": 1024,
