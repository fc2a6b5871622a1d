"""TRL's SFTTrainer with ResumableTrainerMixin under torchrun on Gloo: a tiny Llama from a config, a
word-level tokenizer built here (no hub), 40 pre-tokenized samples whose first token is their id.

    python -m torch.distributed.run --nproc_per_node=W sft_worker.py OUT PHASE [PHASE ...]

PHASE ``whole`` trains max_steps=12 uninterrupted; ``stop`` stops and saves at step 5; ``resume``
continues from that checkpoint (in these new processes, maybe on another world size). Each run
writes OUT/PHASE.rank<r>.json: the ids of every batch trained, the start and final global_step.
"""

import json
import os
import sys

import datasets
import torch
import transformers
import trl
from tokenizers import Tokenizer, models, pre_tokenizers

from shufflepoint.integrations.transformers import ResumableTrainerMixin

VOCAB, MAX_STEPS, STOP = 128, 12, 5


def tokenizer():
    vocab = {f"t{i}": i for i in range(VOCAB - 2)} | {"<pad>": VOCAB - 2, "</s>": VOCAB - 1}
    words = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=words, pad_token="<pad>", eos_token="</s>")


class Recording(ResumableTrainerMixin, trl.SFTTrainer):
    def training_step(self, model, inputs, *args, **kwargs):
        self.record["batches"].append(inputs["input_ids"][:, 0].tolist())
        return super().training_step(model, inputs, *args, **kwargs)


class Stop(transformers.TrainerCallback):
    def __init__(self, record, stop):
        self.record, self.stop = record, stop

    def on_train_begin(self, args, state, control, **kwargs):
        self.record["start_step"] = state.global_step

    def on_step_end(self, args, state, control, **kwargs):
        if self.stop and state.global_step == STOP:
            control.should_save = control.should_training_stop = True


def run(out, phase, rank):
    samples = datasets.Dataset.from_dict({"input_ids": [[i, (i + 1) % 120, (i + 2) % 120] for i in range(40)]})
    config = trl.SFTConfig(output_dir=os.path.join(out, "sft"), per_device_train_batch_size=4, max_steps=MAX_STEPS,
                           save_strategy="no", report_to=[], use_cpu=True, logging_strategy="no", disable_tqdm=True,
                           seed=1234, ddp_find_unused_parameters=False)
    torch.manual_seed(0)
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=8))
    record = {"batches": []}
    trainer = Recording(model=llama, args=config, train_dataset=samples, processing_class=tokenizer(),
                        callbacks=[Stop(record, phase == "stop")])
    trainer.record = record
    trainer.train(resume_from_checkpoint=phase == "resume")
    record["final_step"] = trainer.state.global_step
    with open(os.path.join(out, f"{phase}.rank{rank}.json"), "w") as f:
        json.dump(record, f)


def main():
    out, phases = sys.argv[1], sys.argv[2:]
    for phase in phases:
        run(out, phase, int(os.environ["RANK"]))


if __name__ == "__main__":
    main()
