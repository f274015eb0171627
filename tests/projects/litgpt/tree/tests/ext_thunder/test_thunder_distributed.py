# trimmed from Lightning-AI/litgpt tests/ext_thunder/test_thunder_distributed.py at 26857050fe3f: only the lines the project scan reads
            fabric.backward(y.sum())
