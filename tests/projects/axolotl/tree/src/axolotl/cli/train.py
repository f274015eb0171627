# trimmed from axolotl-ai-cloud/axolotl src/axolotl/cli/train.py at 067b021c8b87: only the lines the project scan reads
        trainer = TorchTrainer(
