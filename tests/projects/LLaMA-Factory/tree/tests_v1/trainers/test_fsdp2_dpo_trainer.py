# trimmed from hiyouga/LLaMA-Factory tests_v1/trainers/test_fsdp2_dpo_trainer.py at ff6d4d12eeb0: only the lines the project scan reads
model: Qwen/Qwen3-0.6B
