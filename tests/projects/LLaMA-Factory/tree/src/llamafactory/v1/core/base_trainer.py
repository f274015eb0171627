# trimmed from hiyouga/LLaMA-Factory src/llamafactory/v1/core/base_trainer.py at ff6d4d12eeb0: only the lines the project scan reads
                        self._deepspeed_engine.backward(loss)
