# trimmed from axolotl-ai-cloud/axolotl src/axolotl/monkeypatch/attention/xformers.py at 067b021c8b87: only the lines the project scan reads
import xformers
    # Use `flash_attn_varlen_func` to prevent cross-example attention and also allow padding free approach
