# trimmed from volcengine/verl tests/utils/test_linear_cross_entropy.py at b178a3cd56f5: only the lines the project scan reads
compute_entropy_from_logits = torch.compile(verl_F.entropy_from_logits, dynamic=True)
