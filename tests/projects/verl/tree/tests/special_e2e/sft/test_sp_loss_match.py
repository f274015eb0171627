# trimmed from volcengine/verl tests/special_e2e/sft/test_sp_loss_match.py at b178a3cd56f5: only the lines the project scan reads
    return FSDPSFTTrainer(
