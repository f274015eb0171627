# trimmed from fla-org/flame custom_models/sba/stickbreaking_attention/sb_varlen/softplus.py at e11e7be75b9e: only the lines the project scan reads
    # flatten out because torch.compile doesn't like newlines
