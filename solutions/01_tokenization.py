"""Solution of notebook 01's build-it (checked by tests/test_exercises.py)."""

from collections import Counter


def my_bpe_merges(ids: list[int], n_merges: int) -> list[tuple[int, int]]:
    """The first n_merges merges of BPE on one sequence of byte ids: merge i replaces
    the most frequent pair (on a tie, the smallest) by the new id 256 + i."""
    merges = []
    while len(merges) < n_merges and len(ids) > 1:
        # 1) count the neighbouring pairs; the most frequent, the smallest on a tie
        counts = Counter(zip(ids, ids[1:]))
        best = max(counts.values())
        pair = min(p for p, c in counts.items() if c == best)
        # 2) replace each occurrence, left to right, by the new id
        new_id, out, i = 256 + len(merges), [], 0
        while i < len(ids):
            if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
                out.append(new_id)
                i += 2
            else:
                out.append(ids[i])
                i += 1
        ids = out
        merges.append(pair)
    return merges
