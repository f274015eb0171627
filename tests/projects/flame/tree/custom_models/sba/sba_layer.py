# trimmed from fla-org/flame custom_models/sba/sba_layer.py at e11e7be75b9e: only the lines the project scan reads
#     from flash_attn import flash_attn_func, flash_attn_varlen_func
