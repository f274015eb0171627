# trimmed from axolotl-ai-cloud/axolotl scripts/analyze_profile.py at 067b021c8b87: only the lines the project scan reads
                    f"Enable kernel fusion (Liger, torch.compile) to reduce "
