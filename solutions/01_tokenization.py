"""Solution of notebook 01's build-it (checked by tests/test_exercises.py)."""

from transformer_lib.tokenization import CHUNK_PATTERN, merge


def my_bpe_encode(text: str, merges: list[tuple[int, int]]) -> list[int]:
    """The ids of `text` under the learnt `merges` (merge k made id 256 + k): split into
    chunks, then in each chunk's UTF-8 bytes merge the known pair of lowest rank, again
    and again, until no known pair is left."""
    ranks = {pair: 256 + k for k, pair in enumerate(merges)}  # pair -> its new id
    out = []
    for chunk in CHUNK_PATTERN.findall(text):
        ids = list(chunk.encode("utf-8"))
        while len(ids) > 1:
            known = [p for p in zip(ids, ids[1:]) if p in ranks]
            if not known:
                break
            pair = min(known, key=ranks.get)  # learnt first = lowest rank
            ids = merge(ids, pair, ranks[pair])
        out.extend(ids)
    return out
