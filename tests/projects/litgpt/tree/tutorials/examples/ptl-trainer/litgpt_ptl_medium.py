# trimmed from Lightning-AI/litgpt tutorials/examples/ptl-trainer/litgpt_ptl_medium.py at 26857050fe3f: only the lines the project scan reads
            name="Llama-3.1-8B",
    trainer = L.Trainer(
