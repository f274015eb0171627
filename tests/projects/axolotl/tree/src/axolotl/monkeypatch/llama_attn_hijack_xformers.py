# trimmed from axolotl-ai-cloud/axolotl src/axolotl/monkeypatch/llama_attn_hijack_xformers.py at 067b021c8b87: only the lines the project scan reads
    import xformers.ops
    transformers.models.llama.modeling_llama.LlamaAttention.forward = xformers_forward
