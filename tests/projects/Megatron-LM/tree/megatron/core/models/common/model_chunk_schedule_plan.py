# trimmed from NVIDIA/Megatron-LM megatron/core/models/common/model_chunk_schedule_plan.py at d98e8a64ddf3: only the lines the project scan reads
            b_grad = b_layer.mtp_post_process.backward(b_grad)
