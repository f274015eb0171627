# trimmed from allenai/open-instruct scripts/data/finetune_dataset_transformation.py at e6c3044aa620: only the lines the project scan reads
    tokenizer_name_or_path="meta-llama/Llama-3.1-8B",
