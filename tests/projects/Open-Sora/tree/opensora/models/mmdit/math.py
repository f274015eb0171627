# trimmed from hpcaitech/Open-Sora opensora/models/mmdit/math.py at 7ad6a96a135f: only the lines the project scan reads
from flash_attn import flash_attn_func as flash_attn_func_v2
    from flash_attn_interface import flash_attn_func as flash_attn_func_v3
