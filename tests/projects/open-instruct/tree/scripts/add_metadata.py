# trimmed from allenai/open-instruct scripts/add_metadata.py at e6c3044aa620: only the lines the project scan reads
#   "model_name": "Meta-Llama-3.1-8B-Instruct",
