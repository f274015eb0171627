# trimmed from axolotl-ai-cloud/axolotl tests/test_attn_implementation.py at 067b021c8b87: only the lines the project scan reads
        cfg = min_base_cfg | DictDefault(attn_implementation="sdpa")
                {"attn_implementation": "flash_attention_2", "flash_attention": True}
        cfg = min_base_cfg | DictDefault(attn_implementation="flash_attention_3")
            attn_implementation="eager", sample_packing=True
            attn_implementation="flex_attention", scaling_softmax=True
