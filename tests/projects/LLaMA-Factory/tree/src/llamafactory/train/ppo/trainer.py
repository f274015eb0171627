# trimmed from hiyouga/LLaMA-Factory src/llamafactory/train/ppo/trainer.py at ff6d4d12eeb0: only the lines the project scan reads
class CustomPPOTrainer(PPOTrainer, Trainer):
            self.tokenizer.padding_side = "left"  # restore padding side
            generate_output: torch.Tensor = unwrapped_model.generate(
