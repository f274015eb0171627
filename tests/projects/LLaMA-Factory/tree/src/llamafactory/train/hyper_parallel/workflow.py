# trimmed from hiyouga/LLaMA-Factory src/llamafactory/train/hyper_parallel/workflow.py at ff6d4d12eeb0: only the lines the project scan reads
    trainer = HyperParallelTrainer(
        tokenizer.padding_side = "left"
