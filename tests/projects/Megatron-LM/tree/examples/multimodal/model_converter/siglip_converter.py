# trimmed from NVIDIA/Megatron-LM examples/multimodal/model_converter/siglip_converter.py at d98e8a64ddf3: only the lines the project scan reads
examples/multimodal/combine_mistral_clip.sh Mistral-7B-Instruct-v0.3-mcore-tp4 google_paligemma_3b_pt_44_mcore_tp_4 mistral_7b_instruct_v0p3_google_paligemma_3b_pt_44_mcore_tp_4
