# trimmed from huggingface/open-r1 src/open_r1/grpo.py at 1416fa0cf215: only the lines the project scan reads
    trainer = GRPOTrainer(
