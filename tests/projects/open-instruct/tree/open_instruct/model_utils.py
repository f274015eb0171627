# trimmed from allenai/open-instruct open_instruct/model_utils.py at e6c3044aa620: only the lines the project scan reads
@torch.compile(dynamic=True)
