# trimmed from hiyouga/LLaMA-Factory src/llamafactory/v1/plugins/trainer_plugins/distributed/deepspeed.py at ff6d4d12eeb0: only the lines the project scan reads
        Delegates to DeepSpeedEngineWrapper.backward() which respects
