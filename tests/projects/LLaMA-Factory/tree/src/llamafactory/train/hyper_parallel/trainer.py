# trimmed from hiyouga/LLaMA-Factory src/llamafactory/train/hyper_parallel/trainer.py at ff6d4d12eeb0: only the lines the project scan reads
class HyperParallelTrainer(CustomSeq2SeqTrainer):
        self.accelerator.backward(loss)
