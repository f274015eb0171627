# trimmed from axolotl-ai-cloud/axolotl src/axolotl/monkeypatch/llama_attn_hijack_flash.py at 067b021c8b87: only the lines the project scan reads

    from xformers.ops.common import get_xformers_operator
    from flash_attn.ops.triton.cross_entropy import (
