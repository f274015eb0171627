# trimmed from haotian-liu/LLaVA llava/train/llama_flash_attn_monkey_patch.py at c121f0432da2: only the lines the project scan reads
    from flash_attn.flash_attn_interface import flash_attn_unpadded_qkvpacked_func
    from flash_attn.flash_attn_interface import flash_attn_varlen_qkvpacked_func as flash_attn_unpadded_qkvpacked_func
            "Output attentions is not supported for patched `LlamaAttention`, returning `None` instead."
