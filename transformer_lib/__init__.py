"""transformer_lib: the finished code of the course 'Building a Transformer from
Scratch'.

Every module but the data loaders, the durable files, the checkers and the command line
is written in a notebook and exported from it (its first line names the notebook: edit
the notebook, then `make export`). One concept a module:

    part           module (notebook)                     what it holds
    foundations    runtime (00), tokenization (01)       devices, seeds, tokenizers
                   data, files (by hand)                 corpora, atomic files
    Part I         embeddings (02), positional (03)      the pieces of a Transformer
                   attention, viz (04), multi_head (05)
                   masks (06)
    shared kit     training, checkpoints (09)            used by both Parts,
                   sampling (10)                         importing neither
    Part II        encoder (07), seq2seq (08)            the English-Chinese
                   torch_reference (07, 08)              translator
                   translation_data, mt_train (09)
                   decoding (10)
    Part III       gpt, lm_train, gpt2_weights (11)      the GPT language model
                   perf (12)                             and its speed
    Part IV        modern, muon, tiled_attention (13)    a modern GPT
    Part V         prompt_mask (14), lora (15)           adapting a model
                   dpo (16)
    exercises      exercises (by hand)                   the checkers of the build-its
    command line   __main__, mt_cli, lm_cli, cli_args    flags in, library calls out

Part II and Part III never import each other. Written by hand: data (the corpora,
pinned by sha256), files (atomic writes and locks), the command line and the checkers
of the build-its (exercises).

    from transformer_lib.runtime import get_device, set_seed, pick
    from transformer_lib.data import load_tiny_shakespeare, load_tatoeba_pairs
"""

__version__ = "0.1.0"
