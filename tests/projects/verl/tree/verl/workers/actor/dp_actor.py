# trimmed from volcengine/verl verl/workers/actor/dp_actor.py at b178a3cd56f5: only the lines the project scan reads
            torch.compile(entropy_from_logits, dynamic=True)
                        self.scaler.scale(loss).backward()
