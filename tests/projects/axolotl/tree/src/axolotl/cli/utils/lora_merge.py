# trimmed from axolotl-ai-cloud/axolotl src/axolotl/cli/utils/lora_merge.py at 067b021c8b87: only the lines the project scan reads
    if w.dtype == torch.float8_e4m3fn and si is not None:
