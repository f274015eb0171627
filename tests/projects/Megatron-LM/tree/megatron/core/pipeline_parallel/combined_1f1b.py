# trimmed from NVIDIA/Megatron-LM megatron/core/pipeline_parallel/combined_1f1b.py at d98e8a64ddf3: only the lines the project scan reads
            torch.autograd.backward(b_output_tensor[0], grad_tensors=b_output_tensor_grad[0])
