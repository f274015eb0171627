# trimmed from Lightning-AI/litgpt tutorials/examples/ptl-trainer/litgpt_ptl_small.py at 26857050fe3f: only the lines the project scan reads
    trainer = L.Trainer(
    lit_model.llm.generate("hello world")
