# trimmed from allenai/open-instruct open_instruct/olmo_core_utils.py at e6c3044aa620: only the lines the project scan reads
    "budget" uses torch.compile's partitioner with `activation_memory_budget` (requires compilation,
    "Qwen/Qwen3-0.6B": "qwen3_0_6B",
