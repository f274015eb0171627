# trimmed from princeton-nlp/SimPO generate.py at 1b3e8f3528a2: only the lines the project scan reads
model_id = "princeton-nlp/gemma-2-9b-it-SimPO"
    "text-generation",
