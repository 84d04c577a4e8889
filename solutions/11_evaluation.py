"""Solution of notebook 11's build-it (checked by tests/test_exercises.py)."""

import math
from collections import Counter


def my_corpus_bleu(hypotheses, references) -> float:
    """Corpus BLEU (0-100) of token lists, with sacreBLEU's clipping, closest reference
    length and brevity penalty."""
    match, total = [0] * 4, [0] * 4  # per n: clipped matches, hypothesis n-grams
    c = r = 0  # hypothesis and reference lengths, summed over the corpus
    for hyp, refs in zip(hypotheses, references):
        c += len(hyp)
        r += len(min(refs, key=lambda ref: (abs(len(ref) - len(hyp)), len(ref))))
        for n in range(1, 5):
            grams = Counter(tuple(hyp[i : i + n]) for i in range(len(hyp) - n + 1))
            most = Counter()  # each n-gram's largest count in one reference
            for ref in refs:
                most |= Counter(tuple(ref[i : i + n]) for i in range(len(ref) - n + 1))
            match[n - 1] += sum((grams & most).values())  # clipped counts
            total[n - 1] += sum(grams.values())
    if min(match) == 0:
        return 0.0  # log 0: no smoothing
    log_p = sum(math.log(m / t) for m, t in zip(match, total)) / 4  # geometric mean
    bp = 1.0 if c >= r else math.exp(1 - r / c)  # brevity penalty: c < r
    return 100 * bp * math.exp(log_p)
