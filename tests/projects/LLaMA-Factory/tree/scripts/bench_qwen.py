# trimmed from hiyouga/LLaMA-Factory scripts/bench_qwen.py at ff6d4d12eeb0: only the lines the project scan reads
    model_name_or_path: str = "Qwen/Qwen2-VL-7B-Instruct",
    trainer = CustomSeq2SeqTrainer(
