# trimmed from volcengine/verl tests/models/test_engine.py at b178a3cd56f5: only the lines the project scan reads
    Qwen3Config,
    Qwen3MoeConfig,
        model = "~/models/Qwen/Qwen2.5-0.5B"
            value_model_path, torch_dtype=torch.float32, attn_implementation="flash_attention_2"
