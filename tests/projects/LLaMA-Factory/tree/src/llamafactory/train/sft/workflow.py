# trimmed from hiyouga/LLaMA-Factory src/llamafactory/train/sft/workflow.py at ff6d4d12eeb0: only the lines the project scan reads
    trainer = CustomSeq2SeqTrainer(
        tokenizer.padding_side = "left"  # use left-padding in generation
