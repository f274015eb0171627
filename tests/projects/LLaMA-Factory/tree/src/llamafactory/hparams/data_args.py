# trimmed from hiyouga/LLaMA-Factory src/llamafactory/hparams/data_args.py at ff6d4d12eeb0: only the lines the project scan reads
            self.packing = True
