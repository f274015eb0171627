# trimmed from Lightning-AI/litgpt tests/test_merge_lora.py at 26857050fe3f: only the lines the project scan reads
    hparams = dict(precision="bf16-mixed", checkpoint_dir="checkpoints/meta-llama/Llama-2-7b", lora_r=8, lora_alpha=16)
