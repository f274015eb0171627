# trimmed from axolotl-ai-cloud/axolotl src/axolotl/evaluate.py at 067b021c8b87: only the lines the project scan reads
        with torch.backends.cuda.sdp_kernel(
