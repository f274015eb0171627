# trimmed from volcengine/verl verl/trainer/sft_trainer_ray.py at b178a3cd56f5: only the lines the project scan reads
    trainer = SFTTrainer(config=config)
