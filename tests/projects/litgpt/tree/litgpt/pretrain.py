# trimmed from Lightning-AI/litgpt litgpt/pretrain.py at 26857050fe3f: only the lines the project scan reads
        # Support both model_name options: meta-llama/Meta-Llama-3-8B & Meta-Llama-3-8B
    model = torch.compile(model)
            fabric.backward(loss / train.gradient_accumulation_iters(devices, num_nodes))
