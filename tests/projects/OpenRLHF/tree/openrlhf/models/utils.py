# trimmed from OpenRLHF/OpenRLHF openrlhf/models/utils.py at 3c3be6234e0c: only the lines the project scan reads
            from flash_attn.ops.triton.cross_entropy import cross_entropy_loss
@torch.compile
