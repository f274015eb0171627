# trimmed from Lightning-AI/litgpt litgpt/scripts/convert_hf_checkpoint.py at 26857050fe3f: only the lines the project scan reads
def copy_weights_gemma_2(
def copy_weights_gemma_3(
