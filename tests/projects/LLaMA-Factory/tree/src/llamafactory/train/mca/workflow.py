# trimmed from hiyouga/LLaMA-Factory src/llamafactory/train/mca/workflow.py at ff6d4d12eeb0: only the lines the project scan reads
    trainer = CustomMcaTrainer(
