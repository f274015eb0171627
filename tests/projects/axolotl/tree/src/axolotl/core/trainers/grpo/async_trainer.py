# trimmed from axolotl-ai-cloud/axolotl src/axolotl/core/trainers/grpo/async_trainer.py at 067b021c8b87: only the lines the project scan reads
class AsyncGRPOTrainer(GRPOTrainer):
            if data.dtype == torch.float8_e4m3fn and name in scale_inv_lookup:
            output = vg.vllm_client.generate(prompts=unique_prompts, **sampling_params)
            prompt_ids, padding_value=self.pad_token_id, padding_side="left"
