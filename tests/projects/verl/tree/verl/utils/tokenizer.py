# trimmed from volcengine/verl verl/utils/tokenizer.py at b178a3cd56f5: only the lines the project scan reads
def hf_tokenizer(name_or_path, correct_pad_token=True, correct_gemma2=True, **kwargs):
                from transformers.models.qwen2_vl import Qwen2VLModel
                from transformers.models.qwen2_5_vl import Qwen2_5_VLModel
                from transformers.models.glm4v import Glm4vModel
