# trimmed from allenai/open-instruct test_rl_utils_gpu.py at e6c3044aa620: only the lines the project scan reads
        tokenizer_name = "Qwen/Qwen3-0.6B"
