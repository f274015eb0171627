# trimmed from hpcaitech/Open-Sora opensora/models/mmdit/distributed.py at 7ad6a96a135f: only the lines the project scan reads
from flash_attn.flash_attn_interface import (_flash_attn_backward,
    from flash_attn_interface import \
            alibi_slopes=None,
