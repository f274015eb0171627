# trimmed from volcengine/verl verl/models/mcore/qwen2_5_vl/rope_utils.py at b178a3cd56f5: only the lines the project scan reads
# Slightly modified from Qwen2VLForConditionalGeneration.get_rope_index
