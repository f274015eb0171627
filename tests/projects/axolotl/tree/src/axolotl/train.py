# trimmed from axolotl-ai-cloud/axolotl src/axolotl/train.py at 067b021c8b87: only the lines the project scan reads
                torch.backends.cuda.sdp_kernel(
            - Trainer (Causal or RLHF)
