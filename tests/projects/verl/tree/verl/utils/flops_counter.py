# trimmed from volcengine/verl verl/utils/flops_counter.py at b178a3cd56f5: only the lines the project scan reads
    # Gemma3 uses GeGLU (gelu_pytorch_tanh), having 3 matrices in MLP (inherited from Gemma2MLP)
