# trimmed from huggingface/text-generation-inference server/text_generation_server/models/custom_modeling/idefics_processing.py at db931fcf42da: only the lines the project scan reads
        generated_ids = model.generate(**inputs, max_length=100)
