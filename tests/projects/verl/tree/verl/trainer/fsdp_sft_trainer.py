# trimmed from volcengine/verl verl/trainer/fsdp_sft_trainer.py at b178a3cd56f5: only the lines the project scan reads
                attn_implementation="flash_attention_2",
                loss.backward()
    trainer = FSDPSFTTrainer(
