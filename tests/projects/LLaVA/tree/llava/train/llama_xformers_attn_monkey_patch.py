# trimmed from haotian-liu/LLaVA llava/train/llama_xformers_attn_monkey_patch.py at c121f0432da2: only the lines the project scan reads
    import xformers.ops
    transformers.models.llama.modeling_llama.LlamaAttention.forward = xformers_forward
