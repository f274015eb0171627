# trimmed from fla-org/flame flame/models/parallelize_fla.py at e11e7be75b9e: only the lines the project scan reads
    Apply tensor parallelism, activation checkpointing, torch.compile, and data
    LlamaForCausalLM:
