# trimmed from axolotl-ai-cloud/axolotl src/axolotl/core/builders/causal.py at 067b021c8b87: only the lines the project scan reads
    DataCollatorWithFlattening,
