"""Decoder layer against nn.TransformerDecoderLayer; the whole model: shapes, causality,
padding, tying, errors."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_lib.masks import causal_mask, padding_mask
from transformer_lib.seq2seq import DecoderLayer, Seq2SeqConfig, Transformer
from transformer_lib.torch_reference import load_torch_decoder_layer


@settings(derandomize=True, deadline=None, max_examples=25)
@given(
    B=st.integers(1, 3),
    T=st.integers(1, 8),
    S=st.integers(1, 8),
    H=st.sampled_from([1, 2, 4]),
    D=st.sampled_from([2, 8]),
    norm_first=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_decoder_layer_matches_pytorch(B, T, S, H, D, norm_first, seed):
    torch.manual_seed(seed)
    C = H * D
    ref = nn.TransformerDecoderLayer(
        C, H, 2 * C, dropout=0.0, batch_first=True, norm_first=norm_first
    ).eval()
    ours = load_torch_decoder_layer(
        DecoderLayer(C, H, 2 * C, dropout=0.0, norm_first=norm_first), ref
    ).eval()
    src = torch.ones(B, S, dtype=torch.long)
    src[0, 1:] = 0  # the first source has one real token
    y, memory = torch.randn(B, T, C), torch.randn(B, S, C)
    expected = ref(
        y, memory, tgt_mask=~causal_mask(T), memory_key_padding_mask=src == 0
    )
    got = ours(y, memory, causal_mask(T), padding_mask(src, 0))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def tiny_model(**kw) -> Transformer:
    torch.manual_seed(0)
    return Transformer(
        Seq2SeqConfig.tiny(src_vocab_size=15, tgt_vocab_size=13, **kw)
    ).eval()


def test_shapes_and_cross_attention_weights():
    model = tiny_model()
    src, tgt = torch.randint(1, 15, (3, 7)), torch.randint(1, 13, (3, 5))
    assert model(src, tgt).shape == (3, 5, 13)
    memory, src_mask = model.encode(src)
    model.decode(tgt, memory, src_mask, need_weights=True)
    weights = model.cross_attention()
    assert len(weights) == 2 and weights[0].shape == (3, 2, 5, 7)
    torch.testing.assert_close(weights[-1].sum(-1), torch.ones(3, 2, 5))


def test_decoder_is_causal():
    model = tiny_model()
    src, tgt = torch.randint(1, 15, (2, 6)), torch.randint(1, 13, (2, 6))
    changed = tgt.clone()
    changed[:, 4] = changed[:, 4] % 12 + 1
    diff = (model(src, changed) - model(src, tgt)).abs().amax(dim=(0, 2))
    assert torch.all(diff[:4] == 0) and torch.all(diff[4:] > 0)


def test_source_padding_does_not_change_logits():
    model = tiny_model()
    src, tgt = torch.randint(1, 15, (1, 4)), torch.randint(1, 13, (1, 5))
    padded = torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(padded, tgt), model(src, tgt))


def test_weight_sharing_and_xavier_init():
    shared, separate = tiny_model(), tiny_model(share_embeddings=False)
    assert shared.output.weight is shared.tgt_embed.weight
    assert separate.output.weight is not separate.tgt_embed.weight
    assert separate.num_params() - shared.num_params() == 13 * 32
    w = shared.encoder.layers[0].ff.linear1.weight  # (F, C) = (64, 32)
    assert w.abs().max() <= (6 / (64 + 32)) ** 0.5


def test_errors_name_the_sizes():
    with pytest.raises(ValueError, match="d_model=30 must be divisible by n_heads=4"):
        Transformer(Seq2SeqConfig(10, 10, d_model=30, n_heads=4))
    model = tiny_model()  # context_len 32
    with pytest.raises(ValueError, match="33 tokens but context_len=32"):
        model(torch.ones(1, 33, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))


def test_tiny_model_learns_to_reverse():
    torch.manual_seed(0)
    model = Transformer(Seq2SeqConfig.tiny(src_vocab_size=8, tgt_vocab_size=8))
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
    g = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(40):  # ids 3..7 reversed, length 4: loss starts near ln 8 = 2.1
        src = torch.randint(3, 8, (32, 4), generator=g)
        tgt = torch.cat(
            [torch.ones(32, 1, dtype=torch.long), src.flip(1), torch.full((32, 1), 2)],
            dim=1,
        )
        loss = nn.functional.cross_entropy(
            model(src, tgt[:, :-1]).transpose(1, 2), tgt[:, 1:]
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] > 1.5 and losses[-1] < 0.5 * losses[0]
