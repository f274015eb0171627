# trimmed from axolotl-ai-cloud/axolotl examples/swanlab/custom_trainer_profiling.py at 067b021c8b87: only the lines the project scan reads
            loss.backward()
class AdvancedProfilingTrainer(AxolotlTrainer):
    base_model: NousResearch/Llama-3.2-1B
