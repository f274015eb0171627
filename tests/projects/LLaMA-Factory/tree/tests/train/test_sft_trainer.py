# trimmed from hiyouga/LLaMA-Factory tests/train/test_sft_trainer.py at ff6d4d12eeb0: only the lines the project scan reads
    trainer = CustomSeq2SeqTrainer(
