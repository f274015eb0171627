# trimmed from volcengine/verl tests/single_controller/detached_worker/server.py at b178a3cd56f5: only the lines the project scan reads
from transformers import LlamaConfig
class Trainer(Worker):
        output.mean().backward()
