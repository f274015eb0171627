# trimmed from axolotl-ai-cloud/axolotl src/axolotl/loaders/patch_manager.py at 067b021c8b87: only the lines the project scan reads
        # the per-layer ``self_attn.config._attn_implementation="sdpa"``
        with flash_attention_2 for the sliding window layers (head_dim=256), then
