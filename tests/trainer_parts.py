"""The tiny dataset and model the Hugging Face Trainer tests train: sample i is the tokens [i, i+1, i+2], so
a batch's ``input_ids[:, 0]`` names its samples; a one-layer Llama small enough to train in milliseconds."""

import torch


class Tokens(torch.utils.data.Dataset):
    def __init__(self, length):
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        ids = torch.tensor([index, index + 1, index + 2])
        return {"input_ids": ids, "labels": ids}


def tiny_llama():
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4)
    return transformers.LlamaForCausalLM(config)
