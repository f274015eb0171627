# trimmed from Lightning-AI/litgpt extensions/xla/finetune/adapter.py at 26857050fe3f: only the lines the project scan reads
            fabric.backward(loss / gradient_accumulation_iters)
