# trimmed from axolotl-ai-cloud/axolotl src/axolotl/monkeypatch/attention/flash_attn_4.py at 067b021c8b87: only the lines the project scan reads
        from flash_attn.cute import (  # noqa: F401
            flash_attn_varlen_func,
