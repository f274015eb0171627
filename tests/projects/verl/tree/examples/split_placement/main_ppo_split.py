# trimmed from volcengine/verl examples/split_placement/main_ppo_split.py at b178a3cd56f5: only the lines the project scan reads
    trainer = RayPPOTrainer(
