# trimmed from volcengine/verl verl/experimental/vla/models/openvla_oft/configuration_prismatic.py at b178a3cd56f5: only the lines the project scan reads
    "llama2-7b-pure": "meta-llama/Llama-2-7b-hf", "llama2-13b-pure": "meta-llama/Llama-2-13b-hf",
    "mistral-v0.1-7b-pure": "mistralai/Mistral-7B-v0.1",
