# trimmed from axolotl-ai-cloud/axolotl src/axolotl/core/trainers/base.py at 067b021c8b87: only the lines the project scan reads
class AxolotlTrainer(
        # Gemma4 (and Gemma3): transformers' masking_utils detects packed sequences
