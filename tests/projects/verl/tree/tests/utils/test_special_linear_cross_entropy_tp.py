# trimmed from volcengine/verl tests/utils/test_special_linear_cross_entropy_tp.py at b178a3cd56f5: only the lines the project scan reads
compute_entropy_from_logits = torch.compile(verl_F.entropy_from_logits, dynamic=True)
