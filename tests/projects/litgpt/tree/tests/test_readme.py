# trimmed from Lightning-AI/litgpt tests/test_readme.py at 26857050fe3f: only the lines the project scan reads
    sys.platform.startswith("win") or sys.platform == "darwin", reason="`torch.compile` is not supported on this OS."
