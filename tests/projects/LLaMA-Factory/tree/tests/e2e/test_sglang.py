# trimmed from hiyouga/LLaMA-Factory tests/e2e/test_sglang.py at ff6d4d12eeb0: only the lines the project scan reads
MODEL_NAME = "Qwen/Qwen2.5-0.5B"
