# trimmed from Lightning-AI/litgpt litgpt/finetune/lora_legacy.py at 26857050fe3f: only the lines the project scan reads
            fabric.backward(loss / train.gradient_accumulation_iters(devices, num_nodes))
