# trimmed from axolotl-ai-cloud/axolotl src/axolotl/integrations/kernels/libs/dsv4/lora_fp8.py at 067b021c8b87: only the lines the project scan reads
        isinstance(w, torch.Tensor) and w.dtype == torch.float8_e4m3fn
