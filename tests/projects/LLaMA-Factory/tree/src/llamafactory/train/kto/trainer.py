# trimmed from hiyouga/LLaMA-Factory src/llamafactory/train/kto/trainer.py at ff6d4d12eeb0: only the lines the project scan reads
class CustomKTOTrainer(KTOTrainer):
