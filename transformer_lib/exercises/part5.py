"""The checkers of Part V's build-its (notebooks 17-19): pairs packed into one row,
LoRA merged into its layers and unloaded, and DPO with an NLL term on the chosen
outputs. By hand."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_lib.exercises.framework import (
    ExerciseError,
    checker,
    compare,
    first_line,
    is_close,
)

# 17-19 · Part V -----------------------------------------------------------------------


def _pack_reference(pairs: list[tuple[list[int], int]]) -> tuple[list, list, Tensor]:
    """Each pair shifted and masked on its own, joined; a causal block per pair."""
    from transformer_lib.decoder_only import shift_and_mask

    xs, ys, blocks = [], [], []
    for ids, n_prompt in pairs:
        x, y = shift_and_mask(ids, n_prompt)
        xs, ys = xs + x, ys + y
        blocks.append(torch.ones(len(x), len(x)).tril())
    return xs, ys, torch.block_diag(*blocks).bool()  # (T, T), True = may attend


def _pairs_keyed_by_length(call: str, got: Tensor, want: Tensor, pairs: list) -> None:
    """The mask's blocks told apart by n_prompt, so that pairs with one prompt length
    share a block."""
    key = torch.tensor([n for ids, n in pairs for _ in ids[1:]])  # per input
    wrong = (key[:, None] == key[None, :]).tril()
    if torch.equal(wrong, want) or not torch.equal(got.bool(), wrong):
        return
    n = [n for _, n in pairs]
    a, b = next(
        (i, j)
        for j in range(1, len(n) + 1)
        for i in range(1, j)
        if n[i - 1] == n[j - 1]
    )
    raise ExerciseError(
        f"{call}: pairs {a} and {b} (both n_prompt {n[a - 1]}) share one block of the "
        f"attention mask: a query of pair {b} sees pair {a}'s keys; mark each pair "
        "by its position in the list, not by its prompt length"
    )


def _wrong_pack_mask(call: str, got, want: Tensor, pairs: list = ()) -> None:
    """Raise ExerciseError naming the usual mistake of the attention mask, if it is."""
    if not (isinstance(got, Tensor) and got.shape == want.shape):
        return
    if pairs:  # every block as long as the first pair's inputs
        _pairs_keyed_by_length(call, got, want, pairs)
        first = len(pairs[0][0]) - 1
        t = torch.arange(len(want))
        same = (t[:, None] // first) == (t[None, :] // first)
        lengths = [len(ids) - 1 for ids, _ in pairs]
        wrong = same & same.tril()
        if not torch.equal(wrong, want) and torch.equal(got.bool(), wrong):
            raise ExerciseError(
                f"{call}: the attention mask's blocks all have the first pair's "
                f"length, {first}: each pair's block is as long as its own inputs, "
                f"len(ids) - 1, here {lengths}"
            )
    if got.is_floating_point() and ((got == 0) | got.isneginf()).all():
        raise ExerciseError(
            f"{call}: the attention mask is an additive one (0 and -inf, dtype "
            f"{got.dtype}): return a bool mask, True = may attend, not an additive one"
        )
    got = got.bool()
    causal = torch.ones_like(want).tril()
    for wrong, what in (
        (
            causal,
            "is plain causal: a query of the second pair may attend the first "
            "pair's keys; allow only keys of the query's own pair",
        ),
        (
            want | want.T,
            "is not causal inside a pair: a query sees its pair's later "
            "keys; each pair's block is lower triangular",
        ),
        (
            want.T,
            "is transposed: row t is query t, and its True columns are the "
            "keys it may attend",
        ),
        (~want, "is inverted: True means may attend"),
        (
            want & ~torch.eye(len(want), dtype=torch.bool),
            "hides the diagonal: a token may attend to itself; each pair's block "
            "is lower triangular with its diagonal, tril(), not tril(-1)",
        ),
    ):
        if torch.equal(got, wrong):
            raise ExerciseError(f"{call}: the attention mask {what}")
    across = got & ~(want | want.T)  # True outside every pair's block
    if across.any() and torch.equal(got & (want | want.T), want):
        i, j = across.nonzero()[0].tolist()
        raise ExerciseError(
            f"{call}: the attention mask lets query {i} attend key {j}, of another "
            "pair: True only for the keys of the query's own pair, up to itself"
        )


@checker("pack_pairs")
def check_pack_pairs(fn: Callable[..., tuple]) -> str:
    """fn([(ids, n_prompt), ...]) -> (inputs, targets, mask): each pair shifted and
    its prompt's targets masked on its own, joined into one row, and a (T, T) bool
    attention mask that is causal inside each pair and keeps the pairs apart."""
    cases = [
        [([1, 10, 11, 2, 20, 21, 3], 4), ([1, 5, 2, 9, 3], 3)],
        [([1, 5, 6, 7, 2, 9], 5), ([1, 2, 20, 3], 2), ([1, 8, 2, 30, 31, 3], 3)],
        [([1, 10, 2, 20, 3], 3), ([1, 11, 2, 21, 3], 3)],  # the docstring's: equal n
        [([4, 10, 11, 2, 20, 3], 4), ([7, 1, 2, 9, 1, 3], 3)],  # no <bos> = 1 first
    ]
    for i, pairs in enumerate(cases):
        if i == 1:  # once a call has run: nothing it left may reach the next
            _kept_between_calls(fn, pairs)
        try:
            _check_packed(fn, pairs)
        except ExerciseError as e:
            if i < len(cases) - 1:
                raise
            raise ExerciseError(
                "pairs that do not start with 1 fail where pairs that do passed: are "
                "the pairs found by looking for a token? Take each pair's place from "
                f"the lengths of the ids given ({e})"
            ) from None
    return (
        "two and three pairs, pairs with one prompt length, and pairs that do not "
        "start with 1: each shifted and "
        "its prompt masked on its own; the attention mask causal inside each pair, "
        "False across pairs"
    )


def _kept_between_calls(fn: Callable[..., tuple], pairs: list) -> None:
    """The same pairs packed twice give the same inputs: lists kept from one call to
    the next (a default argument xs=[], a global) would carry the first call's."""
    inputs = []
    for _ in range(2):  # each call's inputs copied at once: a kept list grows
        got = fn([(list(ids), n) for ids, n in pairs])
        if not (isinstance(got, (tuple, list)) and len(got) == 3):
            return
        inputs.append([int(i) for i in got[0]])
    a, b = inputs
    if a != b:
        raise ExerciseError(
            f"pack_pairs({pairs}) twice gave other inputs the second time "
            f"({len(a)} then {len(b)} ids): lists kept between calls (a default "
            "argument such as xs=[], or a global) carry an earlier call's pairs; "
            "start new lists in each call"
        )


def _check_packed(fn: Callable[..., tuple], pairs: list) -> None:
    """One case of check_pack_pairs."""
    call = f"pack_pairs({pairs})"
    want_x, want_y, want_mask = _pack_reference(pairs)
    given = [(list(ids), n) for ids, n in pairs]
    got = fn(given)
    for k, ((ids, _), (now, _)) in enumerate(zip(pairs, given), 1):
        if now != list(ids):
            raise ExerciseError(
                f"{call}: the caller's pairs changed, pair {k}'s ids became {now}: "
                "read them (ids[:-1], ids[1:]) without pop(), append() or another "
                "in-place edit; the caller may use the pairs again"
            )
    if not (isinstance(got, tuple) and len(got) == 3):
        raise ExerciseError(f"{call}: expected (inputs, targets, mask)")
    for what, part in (("inputs", got[0]), ("targets", got[1])):
        if not isinstance(part, list):
            raise ExerciseError(
                f"{call}: {what} is a {type(part).__name__}, the docstring asks for "
                "a list of ints: join the pairs' ids as lists (torch.tensor makes "
                "one where it is needed)"
            )
    x, y, mask = list(got[0]), list(got[1]), got[2]
    if len(x) == len(want_x) + len(pairs) - 1 or len(y) == len(want_y) + 1:
        raise ExerciseError(
            f"{call}: {len(x)} inputs and {len(y)} targets, expected "
            f"{len(want_x)}: shift each pair on its own (its inputs are ids[:-1]), "
            "or a pair's <eos> learns to predict the next pair's <bos>"
        )
    if x != want_x:
        raise ExerciseError(
            f"{call}: inputs {x}, expected {want_x} (each pair's ids[:-1], joined)"
        )
    if len(y) != len(want_y):
        raise ExerciseError(f"{call}: {len(y)} targets, expected {len(want_y)}")
    kept = [t for t, g in enumerate(y) if g != -100]
    if y != want_y and kept and all(y[t] == x[t] for t in kept):
        raise ExerciseError(
            f"{call}: the targets were not shifted: target {kept[0]} is input "
            f"{kept[0]} ({x[kept[0]]}); each target is the next token, "
            "ids[1:] against the inputs ids[:-1]"
        )
    _masked_not_with_ignore_index(call, y, want_y)
    starts = [0]
    for ids, _ in pairs:
        starts.append(starts[-1] + len(ids) - 1)
    _prompt_per_pair(call, y, want_y, pairs, starts)
    _prompt_off_by_one(call, y, want_y, starts)
    for t, (g, w) in enumerate(zip(y, want_y)):
        if g != w:
            k = max(i for i, s in enumerate(starts) if s <= t) + 1
            if g == -100:
                what = f"masked, but it is part of pair {k}'s translation"
            elif w == -100:
                what = f"kept, but it lies inside pair {k}'s prompt"
            else:
                what = f"{g}, expected {w}"
            raise ExerciseError(f"{call}: target {t} is {what}")
    if isinstance(mask, Tensor) and mask.shape == (1, *want_mask.shape):
        raise ExerciseError(
            f"{call}: the attention mask is {tuple(mask.shape)}, with an extra leading "
            f"axis: return it (T, T) = {tuple(want_mask.shape)}; the model adds the "
            "batch and head axes where it needs them"
        )
    _wrong_pack_mask(call, mask, want_mask, pairs)
    _pairs_one_longer(call, mask, pairs, len(want_x))
    compare(f"{call}: the attention mask", mask, want_mask)


def _prompt_per_pair(call: str, y: list, want_y: list, pairs: list, starts: list):
    """The prompts masked once for the joined row (pair 1's only, at the row's start),
    with pair 1's n_prompt for every pair, or with each pair's <eos> masked too."""
    joined = [t for ids, _ in pairs for t in ids[1:]]
    first = [-100 if i < pairs[0][1] - 1 else t for i, t in enumerate(joined)]
    same_n = [
        -100 if t - s < pairs[0][1] - 1 else joined[t]
        for s, e in zip(starts, starts[1:])
        for t in range(s, e)
    ]
    no_eos = list(want_y)
    for e in starts[1:]:
        no_eos[e - 1] = -100
    for wrong, hint in (
        (
            first,
            "only pair 1's prompt was masked, at the start of the joined row: mask "
            "each pair's first n_prompt - 1 targets at that pair's own offset (shift "
            "and mask each pair, then join)",
        ),
        (
            same_n,
            "every pair's prompt was masked with pair 1's n_prompt: each pair has its "
            "own n_prompt",
        ),
        (
            no_eos,
            "each pair's last target, <eos>, was masked too: the model must learn "
            "when to stop; mask only the prompt's n_prompt - 1 targets",
        ),
    ):
        if y == wrong and y != want_y:
            raise ExerciseError(f"{call}: {hint}")


def _prompt_off_by_one(call: str, y: list, want_y: list, starts: list) -> None:
    """Each pair's masked targets one more, or one fewer, than its n_prompt - 1."""
    counts = [
        (sum(t == -100 for t in y[a:b]), sum(t == -100 for t in want_y[a:b]))
        for a, b in zip(starts, starts[1:])
    ]
    if all(got == want + 1 for got, want in counts):
        raise ExerciseError(
            f"{call}: each pair has one target too many masked, n_prompt of them: "
            "target t predicts id t + 1, so only the first n_prompt - 1 targets are "
            "prompt tokens; the next one, the translation's first token, is learned"
        )
    if all(got == want - 1 for got, want in counts):
        raise ExerciseError(
            f"{call}: each pair has one target too few masked, n_prompt - 2 of them: "
            "the first n_prompt - 1 targets (ids[1:n_prompt]) are prompt tokens; "
            "mask all of them"
        )


def _pairs_one_longer(call: str, mask, pairs: list, T: int) -> None:
    """The mask's pairs counted len(ids) long, not len(ids) - 1 (the inputs)."""
    seg = [i for i, (ids, _) in enumerate(pairs) for _ in ids][:T]
    seg = torch.tensor(seg)
    wrong = torch.ones(T, T, dtype=torch.bool).tril() & (seg[:, None] == seg[None, :])
    if (
        isinstance(mask, Tensor)
        and mask.shape == wrong.shape
        and torch.equal(mask.to(torch.bool), wrong)
    ):
        raise ExerciseError(
            f"{call}: the attention mask's pairs are one token too long: pair 1's "
            f"block spans its {len(pairs[0][0])} ids, but it has {len(pairs[0][0]) - 1}"
            " inputs (ids[:-1]); each pair's block is len(ids) - 1 positions, so "
            "every later boundary shifts"
        )


def _masked_not_with_ignore_index(call: str, y: list, want_y: list) -> None:
    """The prompt's targets masked, but with some value other than -100."""
    masked = [t for t, w in enumerate(want_y) if w == -100]
    used = {repr(y[t]) for t in masked}
    if len(used) != 1 or y[masked[0]] == -100:
        return
    if all(g == w for g, w in zip(y, want_y) if w != -100):
        raise ExerciseError(
            f"{call}: the prompt's targets are {used.pop()}, expected -100: use "
            "-100, the loss's ignore_index (F.cross_entropy skips those targets)"
        )


def _is_lora(module) -> bool:
    """A LoRALinear: the library's, or the one a notebook's kernel defined."""
    return type(module).__name__ == "LoRALinear"


def _merged_weights(
    model, names: list[str], scale: float, base: bool = True
) -> dict[str, Tensor]:
    """Each layer of `names`'s weight W + scale * (alpha / r) B A: merged (scale 1), or
    with one of the usual slips (base=False: W replaced by the update)."""
    weights = {}
    for name in names:
        layer = model.get_submodule(name)
        w = layer.base.weight if base else 0.0
        weights[name] = w + scale * layer.delta_weight()
    return weights


def _wrong_merge(name: str, got: Tensor, slips: dict) -> None:
    """Raise ExerciseError naming the slip that gives layer `name` the weight `got`."""
    for hint, weights in slips.items():
        if name in weights and is_close(got, weights[name], atol=1e-9):
            raise ExerciseError(f"{name}: its weight is {hint}")


_TWICE = "W + 2 (alpha / r) B A: the update was added twice (merge() adds it already)"


@checker("merge_and_unload")
def check_merge_and_unload(fn: Callable[[nn.Module], list[str]]) -> str:
    """fn(model) -> the names of the LoRALinear layers replaced: each merged, W <- W +
    (alpha / r) B A, and its base nn.Linear put back in its place."""
    from transformer_lib.gpt import GPT, GPTConfig
    from transformer_lib.lora import add_lora, lora_layers

    torch.manual_seed(0)
    # with biases, so that a new nn.Linear put in the base's place shows what it lacks
    model = GPT(GPTConfig.tiny(vocab_size=17, n_layers=2, bias=True)).eval()
    n_plain = sum(p.numel() for p in model.parameters())
    # alpha / r = 2.5: no integer, so that alpha // r (2) shows
    names = add_lora(model, rank=4, alpha=10.0)
    model.double()
    for layer in lora_layers(model):
        with torch.no_grad():
            layer.lora_B.normal_(std=0.2)  # an update to merge, as after training
    ids = torch.randint(0, 17, (2, 9))
    with torch.no_grad():
        want = model(ids)[0]
        slips = {
            _TWICE: _merged_weights(model, names, 2.0),
            "W + B A: the scale alpha / r = 2.5 is missing": _merged_weights(
                model, names, 1 / 2.5
            ),
            "W + alpha B A: the scale is alpha / r = 2.5, not alpha": _merged_weights(
                model, names, 4.0
            ),
            "W + (r / alpha) B A: the scale is alpha / r = 2.5, not r / alpha = 0.4": (
                _merged_weights(model, names, 0.4 / 2.5)
            ),
            "W + (alpha // r) B A: the scale alpha // r = 2 was floored, an integer "
            "division; alpha / r = 2.5": _merged_weights(model, names, 2 / 2.5),
            "W alone: the update was dropped; merge (W += (alpha / r) B A) before "
            "taking the base layer out": _merged_weights(model, names, 0.0),
            "W + alpha r B A: the scale is alpha / r = 2.5, not alpha * r = 40": (
                _merged_weights(model, names, 16.0)  # alpha r = r^2 (alpha / r)
            ),
            "(alpha / r) B A alone: the update replaced W; add it to W, W += "
            "(alpha / r) B A": _merged_weights(model, names, 1.0, base=False),
            "W + (alpha / r) (B A)^T, the update transposed (its shape fits a square "
            "layer only): W is (out, in) as B A is, W += (alpha / r) B A": {
                name: layer.base.weight + layer.delta_weight().T
                for name in names
                if (layer := model.get_submodule(name)).base.weight.size(0)
                == layer.base.weight.size(1)
            },
        }
    merged = names[1]  # one layer merged already, as after an evaluation
    with torch.no_grad():
        model.get_submodule(merged).merge()
    bases = {name: model.get_submodule(name).base for name in names}
    before = {name: base.weight.detach().clone() for name, base in bases.items()}
    try:
        returned = fn(model)
    except (RuntimeError, ValueError) as e:
        if "already merged" in str(e):
            raise ExerciseError(
                f"RuntimeError ({first_line(e)}): {merged} was merged "
                "already (its merged is True), and merge() refuses a second one: "
                "merge only the layers not merged yet, if not layer.merged"
            ) from None
        if "leaf" not in str(e):
            raise
        raise ExerciseError(
            f"{type(e).__name__} ({first_line(e).split('. ')[0]}): a weight "
            "that requires "
            "grad was changed in place with autograd on: merge under torch.no_grad()"
        ) from None
    if isinstance(returned, nn.Module):
        raise ExerciseError(
            "fn returned the model: change the model in place and return the list of "
            "the names of the layers it replaced"
        )
    left = [n for n, m in model.named_modules() if _is_lora(m)]
    untouched = all(
        torch.equal(bases[n].weight, before[n])
        and (n == merged or not model.get_submodule(n).merged)
        for n in left
    )
    if left and returned == [] and all(model.get_submodule(n).merged for n in left):
        raise ExerciseError(
            "every LoRALinear was merged but none was replaced, and no name came back: "
            "the loop that replaces saw no layer (a generator is empty once read: "
            "make it a list, list(...), to loop over it twice)"
        )
    if len(left) == len(names) and untouched and isinstance(returned, (list, tuple)):
        raise ExerciseError(
            "the model passed in still holds every LoRALinear: "
            + (
                f"the {len(returned)} names came back, so the work was done on a copy "
                "(copy.deepcopy?); change model itself, in place"
                if returned
                else "none was found; walk model.named_modules(), which reaches "
                "every depth (named_children() sees the top level only)"
            )
        )
    if left:
        raise ExerciseError(
            f"{left[0]} is still a LoRALinear: put its base nn.Linear back in its "
            "place (setattr on the parent module)"
        )
    for name in names:
        layer = model.get_submodule(name)
        if type(layer) is not nn.Linear:
            raise ExerciseError(
                f"{name} is a {type(layer).__name__}, expected the nn.Linear it wraps"
            )
        base = bases[name]
        if layer is not base and (layer.bias is None) != (base.bias is None):
            raise ExerciseError(
                f"{name} is a new nn.Linear "
                + ("without the bias" if layer.bias is None else "with a bias")
                + " the base layer "
                + ("has" if layer.bias is None else "does not have")
                + ": put the merged base back, layer.base (it keeps its bias)"
            )
        if layer is not base and layer.weight.dtype != torch.float64:
            raise ExerciseError(
                f"{name} is a new nn.Linear in {layer.weight.dtype}, the model is in "
                "float64: make it in the model's dtype, or put the merged base back, "
                "layer.base"
            )
        if name == merged and is_close(
            layer.weight.detach(), slips[_TWICE][name], atol=1e-9
        ):
            raise ExerciseError(
                f"{name}: its weight is W + 2 (alpha / r) B A: the layer was merged "
                "already (its merged is True) and its update was added again: merge "
                "only the layers not merged yet, if not layer.merged"
            )
        _wrong_merge(name, layer.weight.detach(), slips)
        if (
            layer is not base
            and base.bias is not None
            and not is_close(layer.bias, base.bias.detach(), atol=1e-9)
        ):
            raise ExerciseError(
                f"{name} is a new nn.Linear whose bias is not the base layer's (a "
                "fresh one?): copy base.bias too, or put the merged base back, "
                "layer.base"
            )
    _still_frozen(model, names)
    n_params = sum(p.numel() for p in model.parameters())
    if n_params != n_plain:
        raise ExerciseError(
            f"the model has {n_params:,} parameters, the plain GPT {n_plain:,}: the "
            "LoRA's A and B are still in it"
        )
    with torch.no_grad():
        compare("the unloaded model's logits", model(ids)[0], want, atol=1e-9)
    if list(returned or []) == [f"{name}.base" for name in names]:
        raise ExerciseError(
            f"returned {returned[0]!r}, ...: '.base' is the LoRALinear's own child; "
            "return the names of the LoRALinear layers replaced, which now name the "
            f"nn.Linear put back: {names[0]!r}, ..."
        )
    if list(returned or []) != names:
        raise ExerciseError(
            f"returned {returned}, expected the names replaced, in the model's order: "
            f"{names}"
        )
    _unload_without_bias(fn)
    return (
        f"{len(names)} LoRALinear layers of a GPT merged and replaced by their "
        "nn.Linear (with biases, and without as the course's GPT): the plain GPT's "
        "parameters, the adapted model's logits"
    )


def _unload_without_bias(fn: Callable) -> None:
    """The course's default GPT has no biases: the layers put back have none either,
    so that the unloaded model loads strictly into a plain GPT."""
    from transformer_lib.gpt import GPT, GPTConfig
    from transformer_lib.lora import add_lora

    torch.manual_seed(1)
    model = GPT(GPTConfig.tiny(vocab_size=17, n_layers=1, bias=False)).eval()
    plain = set(model.state_dict())
    add_lora(model, rank=4, alpha=10.0)
    fn(model)
    extra = sorted(set(model.state_dict()) - plain)
    if extra:
        raise ExerciseError(
            f"on a GPT without biases (the course's default) the unloaded model has "
            f"{extra[0]}, which the plain GPT lacks: a new nn.Linear gets a bias by "
            "default; pass bias=base.bias is not None, or put back layer.base"
        )


def _still_frozen(model: nn.Module, names: list[str]) -> None:
    """add_lora froze every parameter but A and B: the merged model, A and B gone,
    has none that requires grad."""
    if thawed := [n for n, p in model.named_parameters() if p.requires_grad]:
        how = "requires_grad_(True)? Leave it"
        if all(n.rpartition(".")[0] in names for n in thawed):  # the merged layers'
            how = (
                "a new nn.Linear or nn.Parameter requires grad: merge in place, "
                "layer.merge(), and put back layer.base (or freeze the new one)"
            )
        raise ExerciseError(
            f"{len(thawed)} parameters require grad after the merge ({thawed[0]}, "
            "...): add_lora froze the model, and the merge leaves each parameter's "
            f"requires_grad as it was (False); {how}"
        )


def _dpo_nll_reference(
    pc: Tensor, pr: Tensor, rc: Tensor, rr: Tensor, n: Tensor, beta: float, alpha: float
) -> Tensor:
    """DPO + alpha times the chosen outputs' NLL per token, stable for any margin."""
    dpo = -F.logsigmoid(beta * ((pc - rc) - (pr - rr)))  # (B,)
    return (dpo + alpha * (-pc / n)).mean()


def _dpo_nll_mistakes(pc, pr, rc, rr, n) -> list[tuple[Tensor, str]]:
    """What the usual mistakes give at beta 0.5 and alpha 0.3, and what to say."""
    z = 0.5 * ((pc - rc) - (pr - rr))
    dpo = -F.logsigmoid(z)  # (B,)
    no_ref = (-F.logsigmoid(0.5 * (pc - pr)) - 0.3 * pc / n).mean()
    return [
        (dpo.mean(), "this is DPO alone: add alpha times the chosen outputs' NLL"),
        (
            (dpo - 0.5 * 0.3 * pc / n).mean(),
            "beta scaled the NLL too: beta belongs to the margin alone, the NLL "
            "term is alpha * (-policy_chosen / chosen_tokens)",
        ),
        (
            no_ref,
            "the margin leaves out the reference model: it is (policy_chosen - "
            "ref_chosen) - (policy_rejected - ref_rejected)",
        ),
        (
            (dpo + 0.3 * pc / n).mean(),
            "the NLL has the wrong sign: it is minus the log-probability, so that "
            "the term falls as the chosen outputs become more likely",
        ),
        (
            (-F.logsigmoid(0.5 * ((pc - pr) - (rr - rc))) - 0.3 * pc / n).mean(),
            "the reference's log-probabilities are paired wrong: the margin is "
            "(policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)",
        ),
        (
            (dpo - 0.3 * torch.div(pc, n, rounding_mode="floor")).mean(),
            "the NLL per token was floor-divided (//): divide with /, "
            "policy_chosen / chosen_tokens",
        ),
        (
            (dpo - 0.3 * torch.div(pc, n, rounding_mode="trunc")).mean(),
            "the NLL per token was divided as integers, rounded toward 0 "
            "(rounding_mode='trunc', or int()): divide with /, policy_chosen / "
            "chosen_tokens",
        ),
        (
            (dpo - 0.3 * pc).mean(),
            "the NLL is summed over each chosen output's tokens: divide "
            "policy_chosen by chosen_tokens (a long sentence would weigh more)",
        ),
        (
            (dpo - 0.3 * pr / n).mean(),
            "the NLL term is on the rejected outputs: it is the chosen ones' "
            "likelihood that DPO lets fall",
        ),
        (
            (dpo - 0.3 * (pc - rc) / n).mean(),
            "the NLL is the policy's own, -policy_chosen / chosen_tokens, not a "
            "log-ratio to the reference",
        ),
        (
            dpo.mean() - 0.3 * pc.sum() / n.sum(),
            "the NLL pooled all the tokens (sum / sum): divide each sentence's by its "
            "own count, then average over the batch, "
            "(-policy_chosen / chosen_tokens).mean()",
        ),
        (
            (-F.logsigmoid(-z) - 0.3 * pc / n).mean(),
            "the sign of the margin is flipped: the chosen log-ratio comes first",
        ),
        (
            (-F.logsigmoid(2 * z) - 0.3 * pc / n).mean(),
            "multiply the margin by beta",
        ),
        (
            (-0.5 * F.logsigmoid(2 * z) - 0.3 * pc / n).mean(),
            "beta multiplies the margin inside the log-sigmoid, -logsigmoid(beta * "
            "margin), not the loss outside it",
        ),
        (
            (0.3 * dpo - pc / n).mean(),
            "alpha weighs the NLL term, not the DPO term",
        ),
        (
            (dpo - 0.3 * pc / n).sum(),
            "summed over the batch: take the mean",
        ),
        (
            (dpo - pc / n).mean(),
            "the NLL term has weight 1: alpha weighs it, dpo + alpha * (-policy_chosen"
            " / chosen_tokens)",
        ),
        (
            (0.3 * (dpo - pc / n)).mean(),
            "alpha multiplies the whole loss: it weighs the NLL term alone, dpo + "
            "alpha * nll",
        ),
        (
            (dpo - 0.3 * rc / n).mean(),
            "the NLL is of ref_chosen: the reference is frozen and gets no gradient; "
            "the NLL is the policy's, -policy_chosen / chosen_tokens",
        ),
        (
            (dpo - 0.3 * pc / (n + 1)).mean(),
            "the NLL is divided by chosen_tokens + 1: divide by chosen_tokens, the "
            "tokens whose log-probabilities policy_chosen sums",
        ),
        (
            (F.logsigmoid(z) - 0.3 * pc / n).mean(),
            "the DPO term is +log sigmoid(margin): the loss is minus it, "
            "-logsigmoid(beta * margin), which falls as the margin grows",
        ),
        (
            (-torch.sigmoid(z) - 0.3 * pc / n).mean(),
            "the DPO term is -sigmoid(margin), without the log: it is "
            "-logsigmoid(beta * margin), the log-likelihood of preferring the chosen",
        ),
        (
            (dpo - pc / n / 0.3).mean(),
            "the NLL was divided by alpha: alpha multiplies it, dpo + alpha * nll",
        ),
        (
            ((1 - 0.3) * dpo - 0.3 * pc / n).mean(),
            "DPO was weighted by 1 - alpha: the loss is dpo + alpha * nll, DPO at "
            "full weight",
        ),
        (
            (
                -F.logsigmoid(0.5 * ((pc.exp() / rc.exp()) - (pr.exp() / rr.exp())))
                - 0.3 * pc / n
            ).mean(),
            "the margin compares probability ratios, exp(policy - ref): it is a "
            "difference of log-ratios, (policy_chosen - ref_chosen) - "
            "(policy_rejected - ref_rejected)",
        ),
        (
            (-F.logsigmoid(0.6 * z) - 0.5 * pc / n).mean(),
            "beta and alpha are swapped: beta (0.5 here) multiplies the margin, alpha "
            "(0.3) weighs the NLL; the arguments come in the order beta, alpha",
        ),
        (
            dpo.mean() - 0.3 * (pc / n).sum(),
            "the NLL term is summed over the batch, DPO averaged: average both, "
            "(dpo + alpha * nll).mean()",
        ),
        (
            (dpo - 0.3 * pc / (n - 1)).mean(),
            "the NLL is divided by chosen_tokens - 1: divide by chosen_tokens, the "
            "number of tokens whose log-probabilities policy_chosen sums",
        ),
    ]


def _dpo_inputs_kept(given: list, kept: tuple) -> None:
    """The five tensors given to fn are as they were: none edited in place."""
    names = ("policy_chosen", "policy_rejected", "ref_chosen", "ref_rejected")
    for name, g, k in zip((*names, "chosen_tokens"), given, kept):
        if not torch.equal(g, k):
            raise ExerciseError(
                f"{name} was changed in place (/=, +=, or an out= argument): the "
                "caller's log-probabilities and counts must stay as they are (the "
                "margin and the NLL both read them); compute new tensors, x / n, "
                "not x /= n"
            )


def _dpo_nll_gradient(fn: Callable, pc, pr, rc, rr, n) -> None:
    """The loss's gradient with respect to policy_chosen equals the reference's."""
    got_pc, want_pc = pc.clone().requires_grad_(), pc.clone().requires_grad_()
    got = fn(got_pc, pr, rc, rr, n, 0.5, 0.3)
    _dpo_nll_reference(want_pc, pr, rc, rr, n, 0.5, 0.3).backward()
    if not (isinstance(got, Tensor) and got.requires_grad):
        raise ExerciseError(
            "the loss has no gradient with respect to policy_chosen: was it "
            "detached (.detach(), .item(), torch.no_grad)? The optimiser needs it"
        )
    (grad,) = torch.autograd.grad(got, got_pc, allow_unused=True)
    if grad is not None and torch.allclose(grad, want_pc.grad, atol=1e-9):
        return
    (dpo_only,) = torch.autograd.grad(
        _dpo_nll_reference(want_pc, pr, rc, rr, n, 0.5, 0.0), want_pc
    )
    if grad is not None and torch.allclose(grad, dpo_only, atol=1e-9):
        raise ExerciseError(
            "the value is right, but the NLL term sends no gradient to "
            "policy_chosen: it was detached; keep alpha * policy_chosen / "
            "chosen_tokens in the graph"
        )
    nll_only = -0.3 / n / n.numel()  # d/d pc of the mean of -alpha * pc / n
    if grad is not None and torch.allclose(grad, nll_only.to(grad), atol=1e-9):
        raise ExerciseError(
            "the value is right, but policy_chosen gets only the NLL's gradient: it "
            "was detached inside the DPO margin; keep it in the graph there too, "
            "the margin is what pushes the chosen output up"
        )
    compare("the gradient with respect to policy_chosen", grad, want_pc.grad)


def _dpo_nll_clamped(big, want: Tensor, m: float) -> None:
    """Right at the usual margins, finite but too small at a margin of -2000: the DPO
    term stops growing, as when the margin is clamped."""
    if not (isinstance(big, Tensor) and big.numel() == 1 and m < 0):
        return
    nll = want.item() + m  # want = -m (the DPO term) + nll, at beta 1
    dpo = big.item() - nll
    if big.isfinite().all() and 0 < dpo < -m - 1:
        raise ExerciseError(
            f"at a margin of {m:g} the loss is {big.item():g}, expected "
            f"{want.item():g}: its DPO term stops at {dpo:.4g}, as if the margin "
            f"were clamped to {-dpo:.4g}: leave the margin whole; -F.logsigmoid(z) "
            "is stable for any margin"
        )


@checker("dpo_nll_loss")
def check_dpo_nll_loss(fn: Callable[..., Tensor]) -> str:
    """fn(policy_chosen, policy_rejected, ref_chosen, ref_rejected, chosen_tokens, beta,
    alpha) -> the mean of -log sigmoid(beta * margin) - alpha * policy_chosen /
    chosen_tokens."""
    gen = torch.Generator().manual_seed(0)
    pc, pr, rc, rr = (
        -20 * torch.rand(6, generator=gen, dtype=torch.float64) for _ in range(4)
    )
    n = torch.randint(3, 15, (6,), generator=gen)  # each chosen output's tokens
    given = [t.clone() for t in (pc, pr, rc, rr, n)]  # fn must leave them as they are
    got = fn(*given, 0.5, 0.3)
    _dpo_inputs_kept(given, (pc, pr, rc, rr, n))
    per_pair = -F.logsigmoid(0.5 * ((pc - rc) - (pr - rr))) - 0.3 * pc / n
    if isinstance(got, Tensor) and is_close(got, per_pair, atol=1e-9):
        raise ExerciseError(
            f"a loss per pair, shape {tuple(got.shape)}: the loss is one number, the "
            "mean over the batch (.mean())"
        )
    if isinstance(got, Tensor) and got.shape == ():
        for wrong, what in _dpo_nll_mistakes(pc, pr, rc, rr, n):
            if is_close(got, wrong, atol=1e-8):
                raise ExerciseError(what)
    if isinstance(got, Tensor) and got.is_floating_point() and got.dtype != pc.dtype:
        raise ExerciseError(
            f"the loss is {got.dtype}, the log-probabilities {pc.dtype}: keep their "
            "dtype (no .float(), no torch.tensor(..., dtype=...)); a float32 loss "
            "rounds what float64 inputs hold"
        )
    compare(
        "dpo_nll_loss", got, _dpo_nll_reference(pc, pr, rc, rr, n, 0.5, 0.3), atol=1e-9
    )
    _dpo_nll_gradient(fn, pc, pr, rc, rr, n)
    for m in (2000.0, -2000.0):
        one = [torch.tensor([v], dtype=torch.float64) for v in (m, 0.0, 0.0, 0.0)]
        ten = torch.tensor([10])
        big = fn(*one, ten, 1.0, 0.3)
        want = _dpo_nll_reference(*one, ten, 1.0, 0.3)
        if isinstance(big, Tensor) and big.numel() == 1 and not big.isfinite().all():
            raise ExerciseError(
                f"at a margin of {m:g} the loss is {big.item()}, expected "
                f"{want.item():g}: at such a margin exp(-z) overflows to inf and "
                "sigmoid(z) rounds to 0 (its log -inf), so log(sigmoid(z)) and "
                "log1p(exp(-z)) both break; -F.logsigmoid(z) (= F.softplus(-z)) is "
                "stable for any margin"
            )
        _dpo_nll_clamped(big, want, m)
        compare(f"dpo_nll_loss at a margin of {m:g}", big, want, atol=1e-9)
    return (
        "equals DPO plus alpha times the chosen outputs' NLL per token, also at "
        "margins of 2000 and -2000"
    )
