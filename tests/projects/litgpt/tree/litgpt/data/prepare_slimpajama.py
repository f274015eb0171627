# trimmed from Lightning-AI/litgpt litgpt/data/prepare_slimpajama.py at 26857050fe3f: only the lines the project scan reads
    tokenizer_path: Path = Path("checkpoints/Llama-2-7b-hf/"),
