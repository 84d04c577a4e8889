"""The fourteenth blind review's wrong answers (issue 34): one that passed (pairs told
apart by their prompt length in 17) and the ones that got a bare difference, a raw
error or a message that named another mistake."""

import hashlib
from pathlib import Path

import torch
import torch.nn.functional as F
from exercise_helpers import fails, passes, solution

from transformer_lib import exercises as ex

# 08 · the decoder layer's arrangement slips -------------------------------------------

Decoder = solution("08").MyDecoderLayer


class LastResidualNormed(Decoder):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = x + self.self_attn(self.norm1(x), mask=tgt_mask)[0]
        x = x + self.cross_attn(self.norm2(x), memory, mask=memory_mask)[0]
        return self.ff(self.norm3(x)) + self.norm3(x)


class EveryResidualNormed(Decoder):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        h = self.norm1(x)
        x = h + self.self_attn(h, mask=tgt_mask)[0]
        h = self.norm2(x)
        x = h + self.cross_attn(h, memory, mask=memory_mask)[0]
        h = self.norm3(x)
        return h + self.ff(h)


class FeedForwardFirst(Decoder):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = x + self.self_attn(self.norm1(x), mask=tgt_mask)[0]
        x = x + self.ff(self.norm3(x))
        return x + self.cross_attn(self.norm2(x), memory, mask=memory_mask)[0]


class CrossPostNorm(Decoder):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = x + self.self_attn(self.norm1(x), mask=tgt_mask)[0]
        x = self.norm2(x + self.cross_attn(x, memory, mask=memory_mask)[0])
        return x + self.ff(self.norm3(x))


def test_08_arrangement_slips_are_named():
    check = ex.check_decoder_layer
    fails(check, LastResidualNormed, r"feed-forward residual starts from norm3\(h2\)")
    fails(check, EveryResidualNormed, r"each residual starts from the normalised input")
    fails(check, FeedForwardFirst, r"feed-forward network ran before cross-attention")
    fails(check, CrossPostNorm, r"cross-attention sublayer is post-norm")


# 09 · the training step and loop ------------------------------------------------------

step = solution("09").my_train_step
train = solution("09").my_train


def test_09_detached_logits_are_named_not_as_zero_grad_order():
    def detached(model, optimizer, src, tgt_in, tgt_out, pad_id, label_smoothing):
        logits = model(src, tgt_in).detach().requires_grad_()
        loss = F.cross_entropy(
            logits.transpose(1, 2),
            tgt_out,
            ignore_index=pad_id,
            label_smoothing=label_smoothing,
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    fails(ex.check_train_step, detached, r"the loss reached no weight: the logits")


def test_09_a_step_that_sets_training_mode_itself_is_named():
    def sets_mode(model, *args):
        model.train()
        return step(model, *args)

    fails(ex.check_train_step, sets_mode, r"switched it to training mode")


def test_09_batches_used_up_before_the_loop_are_named():
    def counted_first(model, optimizer, batches, lr_at, train_step):
        len(list(batches))
        return train(model, optimizer, batches, lr_at, train_step)

    fails(ex.check_training_loop, counted_first, r"batches was used up before the")


def test_09_steps_counted_from_1_are_named():
    def from_one(model, optimizer, batches, lr_at, train_step):
        return train(model, optimizer, batches, lambda s: lr_at(s + 1), train_step)

    fails(ex.check_training_loop, from_one, r"counted from 1; the first step is s = 0")


# 10 · a beam's score in a list --------------------------------------------------------


def test_10_a_score_in_a_list_is_named():
    beam = solution("10").my_beam_search

    def listed(*args):
        tokens, score = beam(*args)
        return tokens, [score]

    fails(ex.check_beam_search, listed, r"log-probability returned is a list")


# 12 · the block's view, the cache's values and class storage --------------------------

Block = solution("12").MyBlock
Cache = solution("12").MyKVCache


class HeadsViewed(Block):
    def attn(self, x):
        B, T, C = x.shape
        H = self.n_heads
        q, k, v = (t.view(B, H, T, C // H) for t in self.qkv(x).split(C, -1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


def test_12_a_view_of_the_split_heads_is_named():
    fails(
        ex.check_gpt_block,
        HeadsViewed,
        r"\.view cannot reorder memory.*\.view\(B, T, n_heads, d_head\)\.transpose",
    )


def test_12_keys_appended_to_the_values_are_named():
    class KeysAsValues(Cache):
        def update(self, k, v):
            first = self.keys is None
            keys, values = super().update(k, v)
            if not first:
                self.values = torch.cat([values[:, :, : -k.size(2)], k], dim=2)
            return self.keys, self.values

    fails(ex.check_kv_cache, KeysAsValues, r"newest values are the new keys")


def test_12_class_storage_is_named_on_a_rerun():
    class OnTheClass:
        ks, vs = [], []
        length = 0

        def update(self, k, v):
            self.ks.append(k)
            self.vs.append(v)
            self.length += k.size(2)
            return torch.cat(self.ks, 2), torch.cat(self.vs, 2)

    fails(ex.check_kv_cache, OnTheClass, r"share their storage")
    fails(ex.check_kv_cache, OnTheClass, r"holds tokens from an earlier cache")


# 13, 14, 15 ---------------------------------------------------------------------------


def test_13_a_flipped_matrix_is_named():
    def flipped(table):
        u = F.normalize(table, dim=-1)
        s = u @ u.T
        return torch.stack([s.flip(0).diagonal(k).mean() for k in range(len(s))])

    fails(ex.check_cosine_by_distance, flipped, r"read off a flipped matrix")


def test_14_keys_cut_to_whole_blocks_are_named_as_the_dropped_block():
    tiled = solution("14").my_tiled_attention

    def cut(q, k, v, block):
        n = k.size(-2) // block * block
        return tiled(q, k[..., :n, :], v[..., :n, :], block)

    fails(ex.check_tiled_attention, cut, r"block=4: the last block .* was dropped")


def test_15_repeating_along_time_is_named():
    def along_time(q, k, v):
        g, T = q.size(1) // k.size(1), q.size(2)
        k, v = (
            t.repeat_interleave(g, 2)[:, :, :T].repeat_interleave(g, 1) for t in (k, v)
        )
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    fails(ex.check_grouped_attention, along_time, r"repeated along time \(dim 2\)")


# 17 · pairs told apart by their prompt length (it passed) -----------------------------


def test_17_pairs_keyed_by_prompt_length_fail():
    right = solution("17").pack_pairs

    def by_length(pairs):
        inputs, targets, _ = right(pairs)
        key = torch.tensor([n for ids, n in pairs for _ in ids[1:]])
        return inputs, targets, (key[:, None] == key[None, :]).tril()

    fails(
        ex.check_pack_pairs,
        by_length,
        r"pairs 1 and 2 \(both n_prompt 3\) share one block",
    )


# 19 and 00 ----------------------------------------------------------------------------


def test_19_policy_chosen_detached_in_the_margin_is_named():
    def detached(pc, pr, rc, rr, n, beta, alpha):
        z = (pc.detach() - rc) - (pr - rr)
        return (-F.logsigmoid(beta * z) - alpha * pc / n).mean()

    fails(ex.check_dpo_nll_loss, detached, r"only the NLL's gradient: it was detached")


def test_00_the_short_last_chunk_dropped_is_named():
    def whole_then_chunks(path, chunk=1 << 20):
        h, data = hashlib.sha256(), Path(path).read_bytes()
        for i in range(0, max(len(data) - chunk + 1, 1), chunk):
            h.update(data[i : i + chunk])
        return h.hexdigest()

    fails(ex.check_sha256, whole_then_chunks, r"its last chunk, shorter than a full")


def test_the_solutions_still_pass():
    passes(ex.check_decoder_layer, Decoder)
    passes(ex.check_train_step, step)
    passes(ex.check_training_loop, train)
    passes(ex.check_kv_cache, Cache)
    passes(ex.check_pack_pairs, solution("17").pack_pairs)


# 07 · a sublayer's output scaled before the residual (an expert reader's slip) ----


def test_07_a_scaled_branch_is_named():
    Right = solution("07").MyEncoderLayer

    class HalfFeedForward(Right):
        def forward(self, x, mask=None):
            x = x + self.self_attn(self.norm1(x), mask=mask)[0]
            return x + 0.5 * self.ff(self.norm2(x))

    class HalfAttention(Right):
        def forward(self, x, mask=None):
            x = x + 0.5 * self.self_attn(self.norm1(x), mask=mask)[0]
            return x + self.ff(self.norm2(x))

    check = ex.check_encoder_layer
    fails(check, HalfFeedForward, r"feed-forward sublayer's output was scaled by 0\.5 ")
    fails(check, HalfAttention, r"the attention sublayer's output was scaled by 0\.5 ")
    passes(check, Right)


def test_00_the_end_of_file_hint_keeps_the_chunk_size():
    """The fifteenth review: the hint for '' in place of b'' suggested
    `while chunk := f.read(chunk)`, which overwrites the size with the bytes read."""

    def str_end(path, chunk=1 << 20):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while (data := f.read(chunk)) != "":
                h.update(data)
        return h.hexdigest()

    status, text = ex.outcome(ex.check_sha256, str_end)
    assert status == "fail" and "while data := f.read(chunk)" in text, text
    assert "chunk := f.read(chunk)" not in text.replace("data := f.read(chunk)", "")
