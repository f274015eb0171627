# trimmed from haotian-liu/LLaVA llava/train/llava_trainer.py at c121f0432da2: only the lines the project scan reads
class LLaVATrainer(Trainer):
