# trimmed from axolotl-ai-cloud/axolotl src/axolotl/monkeypatch/stablelm_attn_hijack_flash.py at 067b021c8b87: only the lines the project scan reads
from flash_attn.flash_attn_interface import (
    flash_attn_varlen_qkvpacked_func,
