# trimmed from axolotl-ai-cloud/axolotl src/axolotl/monkeypatch/models/qwen3_next/modeling.py at 067b021c8b87: only the lines the project scan reads
