# trimmed from axolotl-ai-cloud/axolotl src/axolotl/monkeypatch/ring_attn/adapters/batch.py at 067b021c8b87: only the lines the project scan reads
    RingAttnFunc.BATCH_RING: torch.compile(ring_flash_attn_func),
            alibi_slopes=None,
