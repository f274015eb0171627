# trimmed from NVIDIA/Megatron-LM megatron/core/pipeline_parallel/schedules.py at d98e8a64ddf3: only the lines the project scan reads
            torch.autograd.backward(output_tensor[0], grad_tensors=output_tensor_grad[0])
