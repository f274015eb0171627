# trimmed from OpenRLHF/OpenRLHF openrlhf/trainer/ppo_trainer.py at 3c3be6234e0c: only the lines the project scan reads
class BasePPOTrainer(ABC):
