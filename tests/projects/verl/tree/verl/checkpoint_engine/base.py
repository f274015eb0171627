# trimmed from volcengine/verl verl/checkpoint_engine/base.py at b178a3cd56f5: only the lines the project scan reads
    >>> trainer = Trainer()
