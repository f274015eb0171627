# trimmed from fla-org/flame flame/train.py at e11e7be75b9e: only the lines the project scan reads
        # apply PT-D Tensor Parallel, activation checkpointing, torch.compile, Data Parallel
                        loss.backward()
