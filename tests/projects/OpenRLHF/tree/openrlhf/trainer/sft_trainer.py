# trimmed from OpenRLHF/OpenRLHF openrlhf/trainer/sft_trainer.py at 3c3be6234e0c: only the lines the project scan reads
class SFTTrainer(ABC):
                self.strategy.backward(loss, self.model, self.optimizer)
