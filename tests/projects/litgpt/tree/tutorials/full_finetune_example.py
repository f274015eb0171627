# trimmed from Lightning-AI/litgpt tutorials/full_finetune_example.py at 26857050fe3f: only the lines the project scan reads
        fabric.backward(loss)
