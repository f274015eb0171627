# trimmed from hiyouga/LLaMA-Factory src/llamafactory/hparams/model_args.py at ff6d4d12eeb0: only the lines the project scan reads
        metadata={"help": "Use pan and scan to process image for gemma3."},
