# trimmed from axolotl-ai-cloud/axolotl tests/kernels/test_gemma4_fused_rope.py at 067b021c8b87: only the lines the project scan reads
(head_dim=256) and global attention (head_dim=512) layer configurations.
        y_ref.sum().backward()
