# trimmed from fla-org/flame flame/models/activation_offloading.py at e11e7be75b9e: only the lines the project scan reads
        >>> loss.backward()
