# trimmed from axolotl-ai-cloud/axolotl src/axolotl/cli/delinearize_llama4.py at 067b021c8b87: only the lines the project scan reads
    from transformers import Llama4ForConditionalGeneration
