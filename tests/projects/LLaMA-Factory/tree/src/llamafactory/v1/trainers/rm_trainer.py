# trimmed from hiyouga/LLaMA-Factory src/llamafactory/v1/trainers/rm_trainer.py at ff6d4d12eeb0: only the lines the project scan reads
class RMTrainer(BaseTrainer):
