# trimmed from axolotl-ai-cloud/axolotl src/axolotl/core/trainers/mamba.py at 067b021c8b87: only the lines the project scan reads
class AxolotlMambaTrainer(AxolotlTrainer):
