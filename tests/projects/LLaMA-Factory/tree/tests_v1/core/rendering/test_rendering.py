# trimmed from hiyouga/LLaMA-Factory tests_v1/core/rendering/test_rendering.py at ff6d4d12eeb0: only the lines the project scan reads
    model_id = "Qwen/Qwen3-4B-Instruct-2507"
