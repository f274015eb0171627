# trimmed from volcengine/verl verl/experimental/vla/dp_rob.py at b178a3cd56f5: only the lines the project scan reads
        self.compute_entropy_from_logits = torch.compile(verl_F.entropy_from_logits, dynamic=True)
                loss.backward()
