# trimmed from volcengine/verl tests/workers/test_fsdp_attn_implementation.py at b178a3cd56f5: only the lines the project scan reads
        override_config = {"attn_implementation": "sdpa"}
        mock_config.architectures = ["LlamaForCausalLM"]
