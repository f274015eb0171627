# trimmed from axolotl-ai-cloud/axolotl src/axolotl/monkeypatch/multipack.py at 067b021c8b87: only the lines the project scan reads
    "gemma2",
    "gemma3",
