# trimmed from huggingface/open-r1 src/open_r1/sft.py at 1416fa0cf215: only the lines the project scan reads
    --model_name_or_path open-r1/Qwen2.5-Math-7B-RoPE-300k \
    trainer = SFTTrainer(
