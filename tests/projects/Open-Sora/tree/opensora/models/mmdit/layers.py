# trimmed from hpcaitech/Open-Sora opensora/models/mmdit/layers.py at 7ad6a96a135f: only the lines the project scan reads
@torch.compile(mode="max-autotune-no-cudagraphs", dynamic=True)
