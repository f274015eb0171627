# trimmed from axolotl-ai-cloud/axolotl src/axolotl/core/trainers/trl.py at 067b021c8b87: only the lines the project scan reads
class AxolotlORPOTrainer(
