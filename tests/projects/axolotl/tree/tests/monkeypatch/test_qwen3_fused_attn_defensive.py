# trimmed from axolotl-ai-cloud/axolotl tests/monkeypatch/test_qwen3_fused_attn_defensive.py at 067b021c8b87: only the lines the project scan reads
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention
        cfg._attn_implementation = "sdpa"
    """Kernel parity at ``head_dim=256`` (Qwen3.5 production); unit tests only cover 32/64."""
        mc = type("MC", (), {"model_type": "qwen3"})()
