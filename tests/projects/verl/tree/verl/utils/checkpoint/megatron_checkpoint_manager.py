# trimmed from volcengine/verl verl/utils/checkpoint/megatron_checkpoint_manager.py at b178a3cd56f5: only the lines the project scan reads
                            from transformers import MistralForSequenceClassification
