# trimmed from hiyouga/LLaMA-Factory src/llamafactory/v1/config/model_args.py at ff6d4d12eeb0: only the lines the project scan reads
        default="Qwen/Qwen3-4B-Instruct-2507",
