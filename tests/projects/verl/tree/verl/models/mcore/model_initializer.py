# trimmed from volcengine/verl verl/models/mcore/model_initializer.py at b178a3cd56f5: only the lines the project scan reads
class MixtralModel(BaseModelInitializer):
        # Qwen2_5_VLForConditionalGeneration
