# trimmed from hpcaitech/Open-Sora opensora/models/hunyuan_vae/distributed.py at 7ad6a96a135f: only the lines the project scan reads
    from xformers.ops.fmha import (
