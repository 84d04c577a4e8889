"""transformer_lib: the finished code of the course 'Building a Transformer from
Scratch'.

Every module but the data loaders, the durable files, the tokenizers' kit, the heatmaps,
the stored runs' files, the checkers and the command line is written in a notebook and
exported from it (its first line names the notebooks: edit them, then `make export`).
One concept a module:

    part           module (notebooks)                     what it holds
    foundations    runtime (00), tokenization (01)        devices, seeds, tokenizers
                   tokenizer_kit (by hand)                their base, HF's, GPT-2's
                   data, downloads, files (by hand)       corpora; pinned downloads;
                                                          atomic files and locks
    Part I         embeddings (02), positional (03)       the pieces of a Transformer
                   attention (04), multi_head (05)
                   masks (06), viz (by hand)              heatmaps of the weights
                   stored (by hand)                       the stored runs' files,
                                                          on Colab downloaded
    Part II        encoder (07), seq2seq (08)             the English-Chinese
                   torch_reference (07, 08)               translator
                   translation_data, translator (09)
                   decoding (10, 11, A1)
    shared kit     training (09, 14, A1), sampling (10)   used by both Parts,
                   checkpoints (A1)                       importing neither
    Part III       gpt, lm_loop (12), perf (14)           the GPT language model
                   tiled_attention (14)                   and its speed
    Part IV        modern (15, 16), muon (16)             a modern GPT
    Part V         decoder_only (17), lora (18)           adapting a model
                   dpo (19)
    appendices     mt_train (A1)                          the long training runs
                   lm_train, gpt2_weights (A2)
    exercises      exercises (by hand)                    the checkers of the build-its,
                                                          a package by Part
    command line   __main__, mt_cli, lm_cli (by hand)     flags in, library calls out
                   cli_args (by hand)

Part II and Part III never import each other. tests/test_structure.py checks this map
against the modules' first lines.

    from transformer_lib.runtime import get_device, set_seed, pick
    from transformer_lib.data import load_tiny_shakespeare, load_tatoeba_pairs
"""

__version__ = "0.1.0"
