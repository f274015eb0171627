# trimmed from hiyouga/LLaMA-Factory src/llamafactory/model/model_utils/checkpointing.py at ff6d4d12eeb0: only the lines the project scan reads
            torch.autograd.backward(output, grad_output)
