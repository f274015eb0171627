# trimmed from hiyouga/LLaMA-Factory src/llamafactory/model/model_utils/attention.py at ff6d4d12eeb0: only the lines the project scan reads
    if getattr(config, "model_type", None) == "gemma2":
        requested_attn_implementation = "sdpa"
        requested_attn_implementation = "flash_attention_2"
        requested_attn_implementation = "flash_attention_3"
