# trimmed from hiyouga/LLaMA-Factory src/llamafactory/v1/trainers/dpo_trainer.py at ff6d4d12eeb0: only the lines the project scan reads
class DPOTrainer(BaseTrainer):
