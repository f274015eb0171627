# trimmed from allenai/open-instruct open_instruct/test_utils.py at e6c3044aa620: only the lines the project scan reads
    "Qwen/Qwen2.5-7B": utils.ModelDims(
    "Qwen/Qwen3-1.7B": utils.ModelDims(
            sliding_window=4096,
