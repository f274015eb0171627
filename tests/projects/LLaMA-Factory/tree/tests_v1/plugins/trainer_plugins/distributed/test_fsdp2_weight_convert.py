# trimmed from hiyouga/LLaMA-Factory tests_v1/plugins/trainer_plugins/distributed/test_fsdp2_weight_convert.py at ff6d4d12eeb0: only the lines the project scan reads
        self.config = types.SimpleNamespace(model_type="qwen3_moe")
