# trimmed from volcengine/verl tests/special_e2e/envs/digit_completion/__init__.py at b178a3cd56f5: only the lines the project scan reads
from transformers import AutoTokenizer, LlamaConfig
