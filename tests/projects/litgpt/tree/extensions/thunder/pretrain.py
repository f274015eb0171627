# trimmed from Lightning-AI/litgpt extensions/thunder/pretrain.py at 26857050fe3f: only the lines the project scan reads
            jit(forward_and_loss, executors) if compiler == "thunder" else torch.compile(forward_and_loss)
            fabric.backward(loss / train.gradient_accumulation_iters(devices, num_nodes))
