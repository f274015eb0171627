# trimmed from volcengine/verl verl/models/transformers/monkey_patch.py at b178a3cd56f5: only the lines the project scan reads
                Qwen2_5_VLForConditionalGeneration,
                Qwen2VLForConditionalGeneration,
            Glm4vForConditionalGeneration,
