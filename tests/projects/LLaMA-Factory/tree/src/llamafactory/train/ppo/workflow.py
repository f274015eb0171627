# trimmed from hiyouga/LLaMA-Factory src/llamafactory/train/ppo/workflow.py at ff6d4d12eeb0: only the lines the project scan reads
    tokenizer.padding_side = "left"  # use left-padding in generation while using right-padding in training
    ppo_trainer: CustomPPOTrainer = CustomPPOTrainer(
