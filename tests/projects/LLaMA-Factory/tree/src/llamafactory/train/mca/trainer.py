# trimmed from hiyouga/LLaMA-Factory src/llamafactory/train/mca/trainer.py at ff6d4d12eeb0: only the lines the project scan reads
class CustomMcaTrainer(McaTrainer):
