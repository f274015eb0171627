# trimmed from hiyouga/LLaMA-Factory tests_v1/core/test_model_loader.py at ff6d4d12eeb0: only the lines the project scan reads
    assert "Qwen3Config" in model_engine.model_config.__class__.__name__
