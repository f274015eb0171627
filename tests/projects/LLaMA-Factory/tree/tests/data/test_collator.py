# trimmed from hiyouga/LLaMA-Factory tests/data/test_collator.py at ff6d4d12eeb0: only the lines the project scan reads
        {"model_name_or_path": "Qwen/Qwen2-VL-2B-Instruct", "template": "qwen2_vl"}
