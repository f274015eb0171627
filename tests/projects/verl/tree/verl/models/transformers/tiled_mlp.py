# trimmed from volcengine/verl verl/models/transformers/tiled_mlp.py at b178a3cd56f5: only the lines the project scan reads
            torch.autograd.backward(output, incoming_grad_shard)
