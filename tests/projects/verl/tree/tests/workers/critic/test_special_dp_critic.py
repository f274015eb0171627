# trimmed from volcengine/verl tests/workers/critic/test_special_dp_critic.py at b178a3cd56f5: only the lines the project scan reads
        model_path = os.path.expanduser("~/models/Qwen/Qwen2.5-0.5B-Instruct")
        mock_config.architectures = ["LlamaForCausalLM"]
            {"name": "sdpa_override", "override_config": {"attn_implementation": "sdpa"}, "expected_attn": "sdpa"},
