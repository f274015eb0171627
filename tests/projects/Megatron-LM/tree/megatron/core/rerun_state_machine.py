# trimmed from NVIDIA/Megatron-LM megatron/core/rerun_state_machine.py at d98e8a64ddf3: only the lines the project scan reads
                    loss.backward()
