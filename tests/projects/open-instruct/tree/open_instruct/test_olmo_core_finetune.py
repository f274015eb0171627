# trimmed from allenai/open-instruct open_instruct/test_olmo_core_finetune.py at e6c3044aa620: only the lines the project scan reads
    @parameterized.expand([("allenai/Olmo-3-1025-7B",), ("allenai/OLMo-2-1124-7B",), ("Qwen/Qwen3-0.6B",)])
