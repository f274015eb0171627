# trimmed from princeton-nlp/SimPO scripts/simpo_trainer.py at 1b3e8f3528a2: only the lines the project scan reads
class SimPOTrainer(Trainer):
            policy_output = model.generate(
