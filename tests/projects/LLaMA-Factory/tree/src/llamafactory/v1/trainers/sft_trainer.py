# trimmed from hiyouga/LLaMA-Factory src/llamafactory/v1/trainers/sft_trainer.py at ff6d4d12eeb0: only the lines the project scan reads
class SFTTrainer(BaseTrainer):
    python -m llamafactory.v1.trainers.sft_trainer --model Qwen/Qwen3-0.6B --train_dataset data/v1_sft_demo.yaml
