"""Part V's measurements (notebooks 17-19), on the Tatoeba Challenge's public
English-Mandarin test, with budgets in process CPU time (`time.process_time()`, one
thread), so that other programs on a shared machine slow a run down without changing
what it computes.

    python benchmarks/part5_adaptation.py arch --seed 0  # encoder-decoder, decoder-only
    python benchmarks/part5_adaptation.py arch --seed 1  # (with and without the mask)
    python benchmarks/part5_adaptation.py lora  # pretraining, then full or LoRA
    python benchmarks/part5_adaptation.py dpo  # DPO vs fine-tuning on the chosen
    python benchmarks/part5_adaptation.py dpo --budget 15 --tag 15s  # a quarter
    python benchmarks/part5_adaptation.py lora-gpt  # the Shakespeare GPT -> English
    python benchmarks/part5_adaptation.py dpo-translator  # notebook 09's translator
    python benchmarks/part5_adaptation.py dpo-translator --full-test  # whole test
    python benchmarks/part5_adaptation.py dpo-translator --pairs-from test-split
    python benchmarks/part5_adaptation.py arch --quick  # seconds: checks the script

Each writes benchmarks/results/part5_<what>.json; `dpo` starts from the decoder-only
model that `arch --seed 0` saved in runs/part5/.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import random
import sys
import time
from pathlib import Path

import torch

from transformer_lib.data import course_pairs, english_key, public_test_pairs
from transformer_lib.decoder_only import (
    PairVocab,
    batches_forever,
    collate_prompts,
    complete,
    fit_cpu_budget,
    masked_loss,
    shift_and_mask,
    translate_gpt,
)
from transformer_lib.decoding import evaluate_model, evaluate_translations, translate
from transformer_lib.dpo import (
    METHODS,
    dpo_loss,
    encode_preferences,
    nbest_translations,
    preference_pair,
    sequence_logprob,
    tune_on_pairs,
)
from transformer_lib.gpt import GPT, GPTConfig, generate
from transformer_lib.lm_loop import bits_per_char, load_lm_data
from transformer_lib.lm_loop import train as lm_train
from transformer_lib.lora import (
    adapt,
    add_lora,
    lora_layers,
    sentences_as_text,
    trainable_parameters,
)
from transformer_lib.mt_train import load_checked_translator
from transformer_lib.runtime import describe_machine, set_seed
from transformer_lib.seq2seq import Seq2SeqConfig, Transformer
from transformer_lib.translation_data import (
    build_tokenizers,
    collate,
    encode_pair,
    group_references,
    label_smoothed_cross_entropy,
    split_by_english,
)
from transformer_lib.translator import TrainConfig, prepare_data, train_loop

ROOT = Path(__file__).resolve().parent.parent
RESULTS, RUNS = ROOT / "benchmarks/results", ROOT / "runs/part5"
BATCH = 64  # pairs per step, for both architectures
# ~1.54M parameters each: one (V_en + V_zh, 128) embedding table in both, 2 + 2 layers
# against 4 decoder blocks whose MLP is 640 wide
ENC_DEC = dict(
    d_model=128, n_heads=4, n_layers=2, d_ff=512, dropout=0.0, context_len=64
)
DEC_ONLY = dict(
    d_model=128, n_heads=4, n_layers=4, d_ff=640, dropout=0.0, context_len=96
)


def data(quick: bool) -> dict:
    """Splits (seed 0), tokenizers learnt on train, the public test."""
    splits = split_by_english(course_pairs())
    if quick:
        splits["train"] = splits["train"][:2000]
    src, tgt = build_tokenizers(splits["train"], 2000 if not quick else 500)
    test = public_test_pairs()
    return {
        "splits": splits,
        "src": src,
        "tgt": tgt,
        "vocab": PairVocab(src, tgt),
        "test": test[:200] if quick else test,
    }


def save(model, name: str, quick: bool) -> None:
    """Keep a trained model in runs/part5/NAME.pt (not in quick mode)."""
    if not quick:
        config = model.config.to_dict()
        torch.save({"config": config, "model": model.state_dict()}, RUNS / f"{name}.pt")


def gpt_config(d: dict) -> GPTConfig:
    return GPTConfig(vocab_size=d["vocab"].vocab_size, **DEC_ONLY)


def gpt_examples(d: dict, pairs, mask: bool) -> list:
    N = DEC_ONLY["context_len"]
    return [shift_and_mask(*d["vocab"].example(en, zh, N), mask) for en, zh in pairs]


def gpt_loss(model: GPT, examples: list, pad_id: int):
    def loss_of(batch: list[int]):
        x, y = collate_prompts([examples[i] for i in batch], pad_id)
        return masked_loss(model(x)[0], y)

    return loss_of


@torch.no_grad()
def gpt_valid_loss(model: GPT, d: dict) -> float:
    """Mean cross-entropy over the Chinese tokens (and <eos>) of the valid pairs."""
    model.eval()
    ex = gpt_examples(d, d["splits"]["valid"], mask=True)
    total = n = 0
    for i in range(0, len(ex), 128):
        x, y = collate_prompts(ex[i : i + 128], d["src"].pad_id)
        k = int((y != -100).sum())
        total, n = total + masked_loss(model(x)[0], y).item() * k, n + k
    return total / n


@torch.no_grad()
def ed_valid_loss(model: Transformer, d: dict) -> float:
    """The same quantity for the encoder-decoder: its targets are the same tokens."""
    model.eval()
    ex = [
        encode_pair(en, zh, d["src"], d["tgt"], 64) for en, zh in d["splits"]["valid"]
    ]
    total = n = 0
    for i in range(0, len(ex), 128):
        src, tgt_in, tgt_out = collate(
            ex[i : i + 128], d["src"].pad_id, d["tgt"].pad_id
        )
        k = int((tgt_out != d["tgt"].pad_id).sum())
        loss = label_smoothed_cross_entropy(
            model(src, tgt_in), tgt_out, 0.0, d["tgt"].pad_id
        )
        total, n = total + loss.item() * k, n + k
    return total / n


def test_gpt(model: GPT, d: dict) -> dict:
    """BLEU-zh and chrF on the public test, greedy; and the CPU seconds it took."""
    t = time.process_time()
    sources, refs = group_references(d["test"])
    scores = evaluate_translations(
        translate_gpt(model, d["vocab"], sources, batch_size=128), refs
    )
    return scores | {"eval_cpu_s": round(time.process_time() - t, 1)}


def test_ed(model: Transformer, d: dict) -> dict:
    t = time.process_time()
    scores = evaluate_model(
        model, d["src"], d["tgt"], d["test"], "greedy", batch_size=128
    )[0]
    return scores | {"eval_cpu_s": round(time.process_time() - t, 1)}


def train_gpt(d, seed, budget, mask=True, model=None, lr=2e-3, pairs=None) -> tuple:
    set_seed(seed)
    model = model or GPT(gpt_config(d))
    ex = gpt_examples(d, pairs or d["splits"]["train"], mask)
    lengths = [len(x) for x, _ in ex]
    fit = fit_cpu_budget(
        model,
        gpt_loss(model, ex, d["src"].pad_id),
        batches_forever(len(ex), lengths, BATCH, seed),
        budget,
        lr=lr,
        log_every=10,
    )
    return model, fit


def row(model, fit: dict, scores: dict, valid: float, params: int) -> dict:
    return {
        "params": params,
        "steps": fit["steps"],
        "train_cpu_s": round(fit["cpu_s"], 1),
        "valid_loss_zh": round(valid, 4),
        **scores,
        "history": fit["history"],
    }


def arch(args, d: dict) -> dict:
    seed, budget, rows = args.seed, args.budget, {}
    set_seed(seed)
    cfg = Seq2SeqConfig(
        d["src"].vocab_size,
        d["tgt"].vocab_size,
        src_pad_id=d["src"].pad_id,
        tgt_pad_id=d["tgt"].pad_id,
        **ENC_DEC,
    )
    ed = Transformer(cfg)
    ex = [
        encode_pair(en, zh, d["src"], d["tgt"], 64) for en, zh in d["splits"]["train"]
    ]

    def ed_loss(batch):
        src, tgt_in, tgt_out = collate(
            [ex[i] for i in batch], d["src"].pad_id, d["tgt"].pad_id
        )
        return label_smoothed_cross_entropy(
            ed(src, tgt_in), tgt_out, 0.0, d["tgt"].pad_id
        )

    lengths = [len(s) + len(t) for s, t in ex]
    fit = fit_cpu_budget(
        ed,
        ed_loss,
        batches_forever(len(ex), lengths, BATCH, seed),
        budget,
        log_every=10,
    )
    rows["encoder-decoder"] = row(
        ed, fit, test_ed(ed, d), ed_valid_loss(ed, d), ed.num_params()
    )
    print(
        "encoder-decoder",
        {k: v for k, v in rows["encoder-decoder"].items() if k != "history"},
        flush=True,
    )
    save(ed, f"encoder_decoder_seed{seed}", args.quick)
    for name, mask in (("decoder-only", True), ("decoder-only, no loss mask", False)):
        model, fit = train_gpt(d, seed, budget, mask)
        rows[name] = row(
            model,
            fit,
            test_gpt(model, d),
            gpt_valid_loss(model, d),
            model.num_params(non_embedding=False),
        )
        print(name, {k: v for k, v in rows[name].items() if k != "history"}, flush=True)
        save(model, f"decoder_only{'' if mask else '_no_mask'}_seed{seed}", args.quick)
    return {"seed": seed, "budget_cpu_s": budget, "rows": rows}


def monolingual(d: dict) -> list:
    """Each side of each training pair alone: `<bos> English <eos>`, `<zh> Chinese
    <eos>`."""
    v, N, out = d["vocab"], DEC_ONLY["context_len"], []
    for en, zh in d["splits"]["train"]:
        ids = [v.src_tok.bos_id, *v.src_tok.encode(en)[: N - 1], v.src_tok.eos_id]
        out.append((ids[:-1], ids[1:]))
        ids = [
            v.zh_id,
            *(v.offset + i for i in v.tgt_tok.encode(zh)[: N - 1]),
            v.eos_id,
        ]
        out.append((ids[:-1], ids[1:]))
    return out


def lora(args, d: dict) -> dict:
    """Pretrain on the monolingual sides, then adapt to translation: full or LoRA."""
    set_seed(0)
    base = GPT(gpt_config(d))
    mono = monolingual(d)
    pre = fit_cpu_budget(
        base,
        gpt_loss(base, mono, d["src"].pad_id),
        batches_forever(len(mono), [len(x) for x, _ in mono], BATCH, 0),
        args.pretrain,
        log_every=10,
    )
    print("pretrained", pre["steps"], "steps", flush=True)
    save(base, "pretrained_lm", args.quick)
    state = {k: v.clone() for k, v in base.state_dict().items()}
    rows = {}
    for name, rank, lr in (
        ("full fine-tuning", 0, 2e-3),
        ("LoRA r=4", 4, 5e-3),
        ("LoRA r=16", 16, 5e-3),
    ):
        model = GPT(gpt_config(d))
        model.load_state_dict(state)
        if rank:
            add_lora(model, rank, alpha=2 * rank)
        trainable = trainable_parameters(model)
        model, fit = train_gpt(d, 0, args.budget, model=model, lr=lr)
        opt_bytes = 2 * 4 * trainable  # AdamW: two fp32 moments per trainable parameter
        rows[name] = row(
            model,
            fit,
            test_gpt(model, d),
            gpt_valid_loss(model, d),
            model.num_params(non_embedding=False),
        )
        rows[name] |= {
            "trainable": trainable,
            "optimizer_state_bytes": opt_bytes,
            "ms_per_step": round(1000 * fit["cpu_s"] / fit["steps"], 1),
            "lr": lr,
        }
        print(name, {k: v for k, v in rows[name].items() if k != "history"}, flush=True)
        save(
            model, f"pretrained_lora_r{rank}" if rank else "pretrained_full", args.quick
        )
    return {
        "pretrain_cpu_s": args.pretrain,
        "pretrain_steps": pre["steps"],
        "pretrain_history": pre["history"],
        "budget_cpu_s": args.budget,
        "rows": rows,
    }


def dpo(args, d: dict) -> dict:
    """Preference pairs from the model's own samples; DPO against SFT on the chosen."""
    path = RUNS / "decoder_only_seed0.pt"
    if args.quick:
        base, _ = train_gpt(d, 0, 5)
        state = base.state_dict()
    else:
        state = torch.load(path, weights_only=True)["model"]

    def fresh() -> GPT:
        m = GPT(gpt_config(d))
        m.load_state_dict(state)
        return m

    base = fresh()
    t = time.process_time()
    sources, refs = group_references(d["splits"]["train"])
    sources, refs = sources[: args.n_sentences], refs[: args.n_sentences]
    N, v = DEC_ONLY["context_len"], d["vocab"]
    gen = torch.Generator().manual_seed(0)
    prompts = [v.prompt(s, N // 2) for s in sources]
    cands = [[v.decode(ids)] for ids in complete(base, prompts, v.eos_id, N)]  # greedy
    for _ in range(args.samples):
        for c, ids in zip(
            cands, complete(base, prompts, v.eos_id, N, temperature=1.0, generator=gen)
        ):
            c.append(v.decode(ids))
    pairs = []
    for s, c, r in zip(sources, cands, refs):
        p = preference_pair(c, r)
        if p is not None:
            pairs.append((s, *p, c[0]))
    gen_cpu = time.process_time() - t
    print(
        f"{len(pairs)} pairs from {len(sources)} sentences, {gen_cpu:.0f} CPU s",
        flush=True,
    )
    chosen_ex = gpt_examples(d, [(s, c) for s, c, *_ in pairs], True)
    rejected_ex = gpt_examples(d, [(s, r) for s, _, r, *_ in pairs], True)
    pad = d["src"].pad_id
    with torch.no_grad():
        base.eval()
        ref = {}
        for name, ex in (("chosen", chosen_ex), ("rejected", rejected_ex)):
            ref[name] = torch.cat(
                [
                    sequence_logprob(base, *collate_prompts(ex[i : i + 128], pad))
                    for i in range(0, len(ex), 128)
                ]
            )
    rows = {
        "base (before tuning)": {**test_gpt(base, d), "steps": 0, "train_cpu_s": 0.0}
    }
    print(rows, flush=True)
    lengths = [len(x) + len(y) for (x, _), (y, _) in zip(chosen_ex, rejected_ex)]

    policy = fresh()
    stats = []

    def dpo_of(batch):
        x, y = collate_prompts(
            [chosen_ex[i] for i in batch] + [rejected_ex[i] for i in batch], pad
        )
        logp = sequence_logprob(policy, x, y)
        pc, pr = logp[: len(batch)], logp[len(batch) :]
        loss, cr, rr = dpo_loss(
            pc, pr, ref["chosen"][batch], ref["rejected"][batch], args.beta
        )
        stats.append(
            ((cr > rr).float().mean().item(), cr.mean().item(), rr.mean().item())
        )
        return loss

    fit = fit_cpu_budget(
        policy,
        dpo_of,
        batches_forever(len(pairs), lengths, 32, 0),
        args.budget,
        lr=args.lr,
        warmup_steps=10,
        log_every=5,
    )
    rows["DPO"] = {
        **test_gpt(policy, d),
        "steps": fit["steps"],
        "train_cpu_s": round(fit["cpu_s"], 1),
        "history": fit["history"],
        "reward_accuracy_last10": sum(s[0] for s in stats[-10:]) / len(stats[-10:]),
        "chosen_reward_last10": sum(s[1] for s in stats[-10:]) / len(stats[-10:]),
        "rejected_reward_last10": sum(s[2] for s in stats[-10:]) / len(stats[-10:]),
    }
    print("DPO", {k: v for k, v in rows["DPO"].items() if k != "history"}, flush=True)
    tag = f"_{args.tag}" if args.tag else ""
    save(policy, f"dpo{tag}", args.quick)
    sft = fresh()
    sft_loss = gpt_loss(sft, chosen_ex, pad)
    fit = fit_cpu_budget(
        sft,
        sft_loss,
        batches_forever(len(pairs), [len(x) for x, _ in chosen_ex], 32, 0),
        args.budget,
        lr=args.lr,
        warmup_steps=10,
        log_every=5,
    )
    rows["fine-tuning on the chosen"] = {
        **test_gpt(sft, d),
        "steps": fit["steps"],
        "train_cpu_s": round(fit["cpu_s"], 1),
        "history": fit["history"],
    }
    print(
        "SFT",
        {k: v for k, v in rows["fine-tuning on the chosen"].items() if k != "history"},
        flush=True,
    )
    save(sft, f"chosen_fine_tuned{tag}", args.quick)
    chrf_w = sum(p[3] for p in pairs) / len(pairs)
    chrf_l = sum(p[4] for p in pairs) / len(pairs)
    greedy_chosen = sum(p[1] == p[5] for p in pairs) / len(pairs)
    return {
        "n_sentences": len(sources),
        "samples": args.samples,
        "n_pairs": len(pairs),
        "candidates_cpu_s": round(gen_cpu, 1),
        "beta": args.beta,
        "lr": args.lr,
        "budget_cpu_s": args.budget,
        "mean_chrf_chosen": round(chrf_w, 2),
        "mean_chrf_rejected": round(chrf_l, 2),
        "greedy_is_chosen": round(greedy_chosen, 3),
        "examples": [list(p[:3]) for p in pairs[:5]],
        "rows": rows,
    }


# lora-gpt: notebook 12's Shakespeare GPT adapted to today's English (notebook 18)
GPT_STEPS, GPT_HELDOUT, GPT_SEEDS = 200, 1000, (0, 1)
GPT_METHODS = {  # name -> (what trains, peak learning rate)
    "full fine-tuning": ("all", 1e-3),
    "LoRA r=4": (4, 1e-2),
    "LoRA r=8": (8, 1e-2),
    "LoRA r=16": (16, 1e-2),
    "embeddings and norms": ("embeddings", 1e-2),
    "last block": ("last", 1e-3),
}


def shakespeare_gpt(data, quick: bool) -> GPT:
    """Notebook 12's CPU GPT after its 700 steps (runs/part5/shakespeare_gpt.pt)."""
    path = RUNS / "shakespeare_gpt.pt"
    config = (GPTConfig.tiny if quick else GPTConfig.cpu)(vocab_size=65)
    set_seed(0)
    model = GPT(config)
    if path.exists() and not quick:
        model.load_state_dict(torch.load(path, weights_only=True))
    else:
        lm_train(model, data, 20 if quick else 700)
        if not quick:
            torch.save(model.state_dict(), path)
    return model.eval()


def trainable_copy(base: GPT, what, seed: int) -> GPT:
    model = copy.deepcopy(base)
    set_seed(seed)  # LoRA's A
    if isinstance(what, int):
        add_lora(model, what, alpha=2 * what)
    elif what != "all":
        model.requires_grad_(False)
        keep = [model.blocks[-1], model.norm_f]
        if what == "embeddings":  # tok_emb is also the output layer (tied)
            keep = [model.tok_emb, model.pos_emb, model.norm_f]
            keep += [m for b in model.blocks for m in (b.norm1, b.norm2)]
        for module in keep:
            module.requires_grad_(True)
    return model


def samples(model: GPT, tokenizer, n: int = 2) -> list[str]:
    """n continuations of a newline, 100 characters each, seeded."""
    g = torch.Generator().manual_seed(0)
    ids = torch.tensor([tokenizer.encode("\n")] * n)
    out = generate(model.eval(), ids, 100, temperature=0.8, generator=g)
    return [tokenizer.decode(row[1:].tolist()) for row in out]


def lora_gpt(args) -> dict:
    shakespeare = load_lm_data()
    english = [en for en, _ in course_pairs()]
    task, dropped = sentences_as_text(english, shakespeare.tokenizer, GPT_HELDOUT)
    steps = 3 if args.quick else GPT_STEPS
    base = shakespeare_gpt(shakespeare, args.quick)
    rows = {"base": {"bpc": round(bits_per_char(base, task)[1], 4), "trainable": 0}}
    text = {"base": samples(base, task.tokenizer)}
    for name, (what, lr) in GPT_METHODS.items():
        for seed in GPT_SEEDS:
            model = trainable_copy(base, what, seed)
            print(name, seed, flush=True)
            row = adapt(model, task, steps, lr, seed)
            rows[f"{name}, seed {seed}"] = row | {
                "trainable": trainable_parameters(model),
                "lr": lr,
            }
            if seed == 0 and name in ("full fine-tuning", "LoRA r=16"):
                text[name] = samples(model, task.tokenizer)
            if seed == 0 and isinstance(what, int):
                x = task.val_ids[: base.config.context_len].unsqueeze(0)
                before = model.eval()(x)[0]
                for layer in lora_layers(model):
                    layer.merge()
                diff = (model(x)[0] - before).abs().max().item()
                rows[f"{name}, seed {seed}"]["merged_max_abs_diff"] = diff
    return {
        "sentences": len(set(english)),
        "dropped": dropped,
        "train_chars": len(task.train_ids),
        "heldout_chars": len(task.val_text),
        "steps": steps,
        "base_shakespeare_bpc": round(bits_per_char(base, shakespeare)[1], 4),
        "rows": rows,
        "samples": text,
    }


# dpo-translator: notebook 09's translator tuned on its own beam n-best (notebook 19)
TRANSLATOR = ROOT / "notebooks/runs/translator.pt"
TR_SEEDS, TR_BETAS, TR_LRS = (0, 1), (0.1, 0.5), (3e-5, 1e-4)
MIN_GAP = 10.0  # chrF points between the chosen and the rejected, or no pair


def tiny_translator() -> tuple:
    """Quick mode (no trained translator, as in CI): notebook 09's quick model after
    one epoch."""
    cfg = dataclasses.replace(TrainConfig.quick(), epochs=1)
    data = prepare_data(cfg)
    model = Transformer(data["model_config"])
    train_loop(model, data["train"], data["valid"], cfg, log=lambda *a: None)
    return model.eval(), data["src_tok"], data["tgt_tok"]


def seeded_subset(pairs: list, n: int | None, seed: int = 0) -> tuple[list, list]:
    """n distinct English sentences drawn with `seed` (all when n is None) and their
    references, in the file's order."""
    sources, refs = group_references(pairs)
    keep = range(len(sources))
    if n is not None and n < len(sources):
        keep = sorted(random.Random(seed).sample(range(len(sources)), n))
    return [sources[i] for i in keep], [refs[i] for i in keep]


def choose_on_dev(fresh, data, dev, budget: float, score) -> tuple[dict, dict, float]:
    """The learning rate of each method and DPO's beta, by BLEU on the dev split after
    half the budget, seed 0: (every dev score, the learning rates, beta)."""
    dev_scores, grid = {}, [("fine-tuning on the chosen", lr, None) for lr in TR_LRS]
    grid += [("DPO", lr, b) for lr in TR_LRS for b in TR_BETAS]
    for method, lr, beta in grid:
        m = fresh()
        tune_on_pairs(m, data, method, budget / 2, lr, beta or 0.1)
        dev_scores[f"{method} lr={lr:g} beta={beta}"] = score(m, *dev)
        print(method, lr, beta, dev_scores[f"{method} lr={lr:g} beta={beta}"])
    best = lambda meth: max(  # noqa: E731
        (g for g in grid if g[0] == meth),
        key=lambda g: dev_scores[f"{g[0]} lr={g[1]:g} beta={g[2]}"]["bleu"],
    )
    _, sft_lr, _ = best("fine-tuning on the chosen")
    _, dpo_lr, beta = best("DPO")
    chosen = {"fine-tuning on the chosen": sft_lr, "DPO": dpo_lr, "DPO + NLL": dpo_lr}
    return dev_scores, chosen, beta


def dpo_translator(args) -> dict:
    """Pairs from the translator's n-best on training sentences (or, `--pairs-from
    test-split`, on the course's test split, which it never trained on); the base, then
    fine-tuning on the chosen, DPO and DPO + NLL at equal CPU time, two seeds each,
    scored on the public test."""
    q = args.quick
    splits = split_by_english(course_pairs(), 1000, 2000, 0)  # notebook 09's split
    split = "test" if args.pairs_from == "test-split" else "train"
    public = {english_key(en) for en, _ in public_test_pairs()}
    seen = {english_key(en) for en, _ in splits["train"]}
    overlap = {  # English sentences (case and spacing normalised) shared
        "with_public_test": sum(english_key(en) in public for en, _ in splits[split]),
        "with_training_split": sum(english_key(en) in seen for en, _ in splits[split]),
    }
    if overlap["with_public_test"]:
        sys.exit(f"{overlap}: the pairs' sentences must not be in the public test")
    if q:
        base, src_tok, tgt_tok = tiny_translator()
    else:
        base, src_tok, tgt_tok, _ = load_checked_translator(TRANSLATOR)
    state = copy.deepcopy(base.state_dict())

    def fresh() -> Transformer:
        m = Transformer(base.config)
        m.load_state_dict(state)
        return m

    def score(model, sources, refs) -> dict:
        t = time.process_time()
        hyps = translate(model, src_tok, tgt_tok, sources)  # greedy, as notebook 11
        return evaluate_translations(hyps, refs) | {
            "eval_cpu_s": round(time.process_time() - t, 1)
        }

    t = time.process_time()
    sources, refs = seeded_subset(splits[split], args.n_sentences)
    cands = nbest_translations(base, src_tok, tgt_tok, sources, args.beam)
    kept = []
    for s, c, r in zip(sources, cands, refs):
        p = preference_pair(c, r) if len(c) > 1 else None
        if p is not None and p[2] - p[3] >= (0.01 if q else MIN_GAP):
            kept.append((s, *p, c[0]))
    if not kept and q:  # an untrained tiny model's beams may all tie (CPU-dependent):
        # the reference against the top candidate still checks the plumbing
        kept = [
            (s, r[0], c[0], 100.0, 0.0, c[0])
            for s, c, r in zip(sources, cands, refs)
            if c and c[0] != r[0]
        ]
        print("quick mode: no candidates differ, pairs are reference against beam 1")
    if not kept:
        sys.exit("no pair has a chrF gap of MIN_GAP: nothing to train on")
    triples = [(s, w, lo) for s, w, lo, *_ in kept]
    data = encode_preferences(base, src_tok, tgt_tok, triples)
    monitor = encode_preferences(base, src_tok, tgt_tok, triples[:128])
    gen_cpu = time.process_time() - t
    print(
        f"{len(kept)} pairs of {len(sources)} sentences, {gen_cpu:.0f} CPU s",
        flush=True,
    )
    dev = seeded_subset(splits["valid"], 20 if q else 300)
    n_test = None if args.full_test else args.test_sentences
    test = seeded_subset(public_test_pairs(), 20 if q else n_test)
    rows = {"base (before tuning)": score(base, *test) | {"steps": 0}}
    print(rows, flush=True)
    if args.full_test:  # the whole public test: the main run's best method, seed 0
        main_run = "_heldout" if split == "test" else ""
        prior = json.loads(
            (RESULTS / f"part5_dpo_translator{main_run}.json").read_text()
        )
        dev_scores, chosen, beta = prior["dev"], prior["lr"], prior["beta"]
        mean_bleu = lambda m: sum(  # noqa: E731
            prior["rows"][f"{m}, seed {s}"]["bleu"] for s in TR_SEEDS
        )
        methods, seeds = (max(METHODS, key=mean_bleu),), (0,)  # DPO + NLL on train
    else:
        dev_scores, chosen, beta = choose_on_dev(fresh, data, dev, args.budget, score)
        methods, seeds = METHODS, TR_SEEDS
    for method in methods:
        for seed in seeds:
            set_seed(seed)
            m = fresh()
            fit = tune_on_pairs(
                m, data, method, args.budget, chosen[method], beta, 1.0, seed, monitor
            )
            rows[f"{method}, seed {seed}"] = score(m, *test) | {
                "steps": fit["steps"], "train_cpu_s": fit["cpu_s"], "log": fit["log"]
            }  # fmt: skip
            print(
                method,
                seed,
                {k: v for k, v in rows[f"{method}, seed {seed}"].items() if k != "log"},
                flush=True,
            )
    n = len(kept)
    return {
        "pairs_from": f"{split} split",
        "overlap": overlap,
        "n_sentences": len(sources),
        "beam": args.beam,
        "min_gap": MIN_GAP,
        "n_pairs": n,
        "candidates_cpu_s": round(gen_cpu, 1),
        "mean_candidates": round(sum(map(len, cands)) / len(cands), 2),
        "mean_chrf_chosen": round(sum(k[3] for k in kept) / n, 2),
        "mean_chrf_rejected": round(sum(k[4] for k in kept) / n, 2),
        "beam_best_is_chosen": round(sum(k[1] == k[5] for k in kept) / n, 3),
        "dev_sentences": len(dev[0]),
        "dev": dev_scores,
        "lr": chosen,
        "beta": beta,
        "alpha": 1.0,
        "budget_cpu_s": args.budget,
        "test_sentences_used": len(test[0]),
        "examples": [list(k[:3]) for k in kept[:5]],
        "rows": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "what", choices=("arch", "lora", "dpo", "lora-gpt", "dpo-translator")
    )
    ap.add_argument("--seed", type=int, default=0, help="arch: the seed of this run")
    ap.add_argument(
        "--budget", type=float, default=None, help="CPU seconds per training run"
    )
    ap.add_argument(
        "--pretrain", type=float, default=60.0, help="lora: CPU s of pretraining"
    )
    ap.add_argument(
        "--n-sentences",
        type=int,
        default=None,
        help="dpo, dpo-translator: training sentences (1500, 2000)",
    )
    ap.add_argument(
        "--samples", type=int, default=4, help="dpo: sampled candidates each"
    )
    ap.add_argument(
        "--beam", type=int, default=6, help="dpo-translator: beam size (n-best)"
    )
    ap.add_argument(
        "--test-sentences",
        type=int,
        default=1000,
        help="dpo-translator: a seeded subset of the public test",
    )
    ap.add_argument(
        "--pairs-from",
        choices=("train", "test-split"),
        default="train",
        help="dpo-translator: the sentences the pairs come from: the translator's "
        "training split, or the course's test split, never trained on (tag 'heldout')",
    )
    ap.add_argument("--beta", type=float, default=0.1, help="dpo: the DPO beta")
    ap.add_argument("--lr", type=float, default=2e-4, help="dpo: peak learning rate")
    ap.add_argument(
        "--quick", action="store_true", help="a few seconds each, not saved"
    )
    ap.add_argument(
        "--full-test",
        action="store_true",
        help="dpo-translator: the base and the main run's best method (seed 0, its "
        "settings) on the whole public test; tag 'full'",
    )
    ap.add_argument("--tag", default="", help="appended to the result's file name")
    args = ap.parse_args()
    for name, low in (("budget", 0), ("pretrain", 0), ("beta", 0), ("lr", 0)):
        value = getattr(args, name)
        if value is not None and value <= low:
            ap.error(f"--{name} must be > {low}, got {value}")
    if not all(c.isalnum() or c in "-_" for c in args.tag):
        ap.error(f"--tag may hold letters, digits, - and _ only, got {args.tag!r}")
    if args.what == "dpo-translator" and not args.quick and not TRANSLATOR.exists():
        sys.exit(f"{TRANSLATOR} is missing: train notebook 09's translator first")
    if args.n_sentences is None:
        args.n_sentences = 2000 if args.what == "dpo-translator" else 1500
    if args.n_sentences < 1 or args.samples < 1:
        ap.error("--n-sentences and --samples must be >= 1")
    if args.budget is None:
        budgets = {"arch": 120.0, "lora": 60.0, "dpo": 60.0, "dpo-translator": 60.0}
        args.budget = budgets.get(args.what, 0)
    if args.quick:
        args.budget, args.pretrain, args.n_sentences = 3.0, 3.0, 40
    if args.pairs_from != "train" and args.what != "dpo-translator":
        ap.error("--pairs-from is an option of dpo-translator")
    if args.full_test and not args.tag:
        args.tag = "full"
    if args.pairs_from == "test-split":
        args.tag = "heldout" + (f"_{args.tag}" if args.tag else "")
    if args.quick and args.what == "dpo-translator":
        args.budget = 1.0  # 9 runs of an untrained tiny model: checks the script
    if (
        args.what == "dpo"
        and not args.quick
        and not (RUNS / "decoder_only_seed0.pt").exists()
    ):
        sys.exit(
            f"{RUNS / 'decoder_only_seed0.pt'} is missing: run `arch --seed 0` first"
        )
    torch.set_num_threads(1)  # process CPU time = one core's time: comparable runs
    RUNS.mkdir(parents=True, exist_ok=True)
    if args.what == "lora-gpt":
        d, result = None, lora_gpt(args)
    elif args.what == "dpo-translator":
        d, result = None, dpo_translator(args)
    else:
        d = data(args.quick)
        result = {"arch": arch, "lora": lora, "dpo": dpo}[args.what](args, d)
    name = f"part5_{args.what.replace('-', '_')}" + (
        f"_seed{args.seed}" if args.what == "arch" else ""
    )
    name += f"_{args.tag}" if args.tag else ""
    result |= {
        "command": "python benchmarks/"
        + " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "machine": describe_machine(torch.device("cpu")),
        "torch": torch.__version__,
        "threads": 1,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    if d is not None:
        result["test_sentences"] = len(group_references(d["test"])[0])
    out = RESULTS / f"{name}.json"
    if args.quick:
        print(
            json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1)[
                :2000
            ]
        )
    else:
        out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
        print("wrote", out)


if __name__ == "__main__":
    main()
