# trimmed from axolotl-ai-cloud/axolotl src/axolotl/processing_strategies.py at 067b021c8b87: only the lines the project scan reads
    """Gemma3/3n ``<start_of_turn>{role} ... <end_of_turn>`` (Gemma 4 uses different markers)."""
