# trimmed from OpenRLHF/OpenRLHF openrlhf/cli/train_sft.py at 3c3be6234e0c: only the lines the project scan reads
    trainer = SFTTrainer(
        args.ds.attn_implementation = "flash_attention_2"
