# trimmed from volcengine/verl verl/experimental/one_step_off_policy/main_ppo.py at b178a3cd56f5: only the lines the project scan reads
        trainer = OneStepOffRayTrainer(
