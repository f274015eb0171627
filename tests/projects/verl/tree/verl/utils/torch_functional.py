# trimmed from volcengine/verl verl/utils/torch_functional.py at b178a3cd56f5: only the lines the project scan reads
    from flash_attn.ops.triton.cross_entropy import cross_entropy_loss
    """torch.compile might be replaced by mindspeed on NPU, this contextmanager
