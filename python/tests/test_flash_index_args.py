# test_flash_index_args.py — the index arguments of attnflow.flash
# (cache_seqlens, cache_batch_idx, block_table, cu_seqlens) on every entry
# point that takes them: a bad value of each is refused with a clear error,
# and an error leaves every cache tensor byte-identical (nothing is written
# before the last check).
#
# Invariants: expected values come from torch in float64 (the dense
# softmax(q·kᵀ)·v of the keys each sequence sees); "unchanged" is a byte
# comparison of the cache tensors before and after the call.
import math

import pytest
import torch

from attnflow import flash

B, LQ, H, HKV, D = 2, 1, 4, 2, 8
PAGE, NBLOCKS = 4, 4


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _dense(lq=LQ, lmax=8, seed=0):
    g = _gen(seed)
    q = torch.randn(B, lq, H, D, generator=g)
    kc = torch.randn(B, lmax, HKV, D, generator=g)
    vc = torch.randn(B, lmax, HKV, D, generator=g)
    k = torch.randn(B, 1, HKV, D, generator=g)
    v = torch.randn(B, 1, HKV, D, generator=g)
    return q, kc, vc, k, v


def _paged(seed=0):
    g = _gen(seed)
    q = torch.randn(B, LQ, H, D, generator=g)
    kc = torch.randn(NBLOCKS, PAGE, HKV, D, generator=g)
    vc = torch.randn(NBLOCKS, PAGE, HKV, D, generator=g)
    k = torch.randn(B, 1, HKV, D, generator=g)
    v = torch.randn(B, 1, HKV, D, generator=g)
    return q, kc, vc, k, v


def _bytes(*ts):
    return [t.detach().clone().contiguous().view(torch.uint8) for t in ts]


def _assert_refused(exc, match, fn, caches):
    before = _bytes(*caches)
    with pytest.raises(exc, match=match):
        fn()
    for b, t in zip(before, caches):
        assert torch.equal(b, t.detach().contiguous().view(torch.uint8)), "a cache was written"


def _ref(q, keys, values):
    """softmax(q kᵀ / √D) v in float64, one sequence: q [Lq,H,D], keys [L,Hkv,D]."""
    qq = q.double().transpose(0, 1)
    kk = keys.double().transpose(0, 1).repeat_interleave(H // HKV, 0)
    vv = values.double().transpose(0, 1).repeat_interleave(H // HKV, 0)
    w = torch.softmax(qq @ kk.transpose(1, 2) / math.sqrt(D), -1)
    return (w @ vv).transpose(0, 1)


# ---- the cases of the hostile round, each refused with the cache unchanged ----

def test_negative_cache_seqlens_with_new_kv_is_refused():
    q, kc, vc, k, v = _dense()
    sl = torch.tensor([3, -1], dtype=torch.int32)
    _assert_refused(ValueError, r"cache_seqlens\[1\] = -1 is negative",
                    lambda: flash.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=sl),
                    (kc, vc))
    _assert_refused(ValueError, r"cache_seqlens\[0\] = -2 is negative",
                    lambda: flash.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=-2),
                    (kc, vc))


@pytest.mark.parametrize("entry", [-1, 9])
def test_block_table_out_of_range_writes_nothing(entry):
    q, kc, vc, k, v = _paged()
    # sequence 0 is valid; sequence 1's second block is not: nothing may be
    # appended to sequence 0 before the error.
    bt = torch.tensor([[3, 2], [1, entry]], dtype=torch.int32)
    sl = torch.tensor([5, 6], dtype=torch.int32)
    _assert_refused(ValueError, rf"block_table\[1\]\[1\] = {entry} is outside \[0, 4\)",
                    lambda: flash.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=sl,
                                                          block_table=bt), (kc, vc))


def test_varlen_block_table_negative_entry_is_refused():
    g = _gen(1)
    q = torch.randn(3, H, D, generator=g)
    kc = torch.randn(NBLOCKS, PAGE, HKV, D, generator=g)
    vc = torch.randn(NBLOCKS, PAGE, HKV, D, generator=g)
    cu_q = torch.tensor([0, 3], dtype=torch.int32)
    cu_k = torch.tensor([0, 6], dtype=torch.int32)
    bt = torch.tensor([[-1, 0]], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"block_table\[0\]\[0\] = -1 is outside \[0, 4\)"):
        flash.flash_attn_varlen_func(q, kc, vc, cu_q, cu_k, 3, 6, block_table=bt)
    # an entry past the keys the sequence reads is never looked at
    ok = torch.tensor([[1, 0, -1]], dtype=torch.int32)
    out = flash.flash_attn_varlen_func(q, kc, vc, cu_q, cu_k, 3, 6, block_table=ok)
    keys = torch.cat([kc[1], kc[0, :2]])
    vals = torch.cat([vc[1], vc[0, :2]])
    assert torch.allclose(out.double(), _ref(q, keys, vals), atol=1e-5)


@pytest.mark.parametrize("bad", [torch.tensor([2.7, 3.2]), torch.tensor([True, False]),
                                 2.5, "3", [2, 3]])
def test_cache_seqlens_of_the_wrong_type_is_refused(bad):
    q, kc, vc, k, v = _dense()
    _assert_refused(TypeError, "cache_seqlens must be",
                    lambda: flash.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=bad),
                    (kc, vc))


def test_cache_batch_idx_out_of_range_or_wrong_type_is_refused():
    q, kc, vc, k, v = _dense()
    for bad, exc, match in [(torch.tensor([-1, 0]), ValueError, r"cache_batch_idx\[0\] = -1"),
                            (torch.tensor([0, 2]), ValueError, r"cache_batch_idx\[1\] = 2"),
                            (torch.tensor([0.0, 1.0]), TypeError, "cache_batch_idx must be"),
                            (torch.tensor([0]), ValueError, "cache_batch_idx has 1 entries"),
                            (torch.tensor([1, 1]), ValueError, "repeats a row")]:
        _assert_refused(exc, match, lambda: flash.flash_attn_with_kvcache(
            q, kc, vc, k, v, cache_seqlens=torch.tensor([1, 2]), cache_batch_idx=bad), (kc, vc))


# ---- each argument's bad values on every entry point ---------------------------

BAD_INDEX = [  # (value, exception, message)
    (torch.tensor([0.0, 3.0]), TypeError, "int32/int64"),
    (torch.tensor([[0, 3]]), ValueError, r"must be \[B\+1\]"),
    (torch.tensor([1, 3]), ValueError, r"\[0\] = 1 must be 0"),
    (torch.tensor([0, 4, 3]), ValueError, "decreases"),
    ("0,3", TypeError, "int32/int64 torch tensor"),
]


@pytest.mark.parametrize("value,exc,match", BAD_INDEX)
@pytest.mark.parametrize("which", ["q", "k"])
def test_cu_seqlens_bad_values_on_every_varlen_entry(value, exc, match, which):
    g = _gen(2)
    t = torch.randn(3, H, D, generator=g)
    good = torch.tensor([0, 3], dtype=torch.int32)
    cu_q, cu_k = (value, good) if which == "q" else (good, value)
    with pytest.raises(exc, match=f"cu_seqlens_{which}.*{match}|{match}"):
        flash.flash_attn_varlen_func(t, t[:, :HKV], t[:, :HKV], cu_q, cu_k, 3, 3)
    kv = torch.stack([t[:, :HKV], t[:, :HKV]], 1)
    with pytest.raises(exc, match=match):
        flash.flash_attn_varlen_kvpacked_func(t, kv, cu_q, cu_k, 3, 3)
    qkv = torch.stack([t, t, t], 1)
    with pytest.raises(exc, match=match):
        flash.flash_attn_varlen_qkvpacked_func(qkv, value, 3)


@pytest.mark.parametrize("bt,exc,match", [
    (torch.tensor([[0.0, 1.0], [2.0, 3.0]]), TypeError, "block_table must be an int32/int64"),
    (torch.tensor([0, 1, 2, 3], dtype=torch.int32), ValueError, r"block_table must be \[B, max_blocks\]"),
    (torch.tensor([[0, 1]], dtype=torch.int32), ValueError, "block_table has 1 rows, expected B = 2"),
    (torch.tensor([[0], [1]], dtype=torch.int32), ValueError,
     "needs 6 keys = 2 blocks|exceeds the cache capacity 4"),
    (torch.tensor([[0, 4], [1, 2]], dtype=torch.int32), ValueError, r"block_table\[0\]\[1\] = 4"),
])
def test_block_table_bad_values_on_both_paged_entries(bt, exc, match):
    q, kc, vc, k, v = _paged(3)
    sl = torch.tensor([5, 6], dtype=torch.int32)
    _assert_refused(exc, match, lambda: flash.flash_attn_with_kvcache(
        q, kc, vc, k, v, cache_seqlens=sl, block_table=bt), (kc, vc))
    tq = torch.randn(2, H, D)
    cu_q = torch.tensor([0, 1, 2], dtype=torch.int32)
    cu_k = torch.tensor([0, 6, 12], dtype=torch.int32)
    with pytest.raises(exc, match=match):
        flash.flash_attn_varlen_func(tq, kc, vc, cu_q, cu_k, 1, 6, block_table=bt)


def test_two_sequences_appending_into_one_slot_is_refused():
    q, kc, vc, k, v = _paged(4)
    bt = torch.tensor([[0, 1], [0, 2]], dtype=torch.int32)  # block 0 shared
    sl = torch.tensor([2, 2], dtype=torch.int32)             # both append at slot 2 of block 0
    _assert_refused(ValueError, "same cache slot", lambda: flash.flash_attn_with_kvcache(
        q, kc, vc, k, v, cache_seqlens=sl, block_table=bt), (kc, vc))


def test_new_kv_of_the_wrong_shape_writes_nothing():
    q, kc, vc, k, v = _dense()
    _assert_refused(ValueError, r"new k must be \[B=2", lambda: flash.flash_attn_with_kvcache(
        q, kc, vc, k[:1], v[:1], cache_seqlens=torch.tensor([1, 2])), (kc, vc))
    _assert_refused(ValueError, "exceeds the cache capacity 8", lambda: flash.flash_attn_with_kvcache(
        q, kc, vc, k, v, cache_seqlens=torch.tensor([1, 8])), (kc, vc))


# ---- what is accepted still computes the right thing ----------------------------

def test_cache_batch_idx_with_new_kv_appends_into_the_chosen_rows():
    g = _gen(5)
    q = torch.randn(B, LQ, H, D, generator=g)
    kc = torch.randn(3, 8, HKV, D, generator=g)
    vc = torch.randn(3, 8, HKV, D, generator=g)
    k = torch.randn(B, 1, HKV, D, generator=g)
    v = torch.randn(B, 1, HKV, D, generator=g)
    k0, v0 = kc.clone(), vc.clone()
    rows, sl = torch.tensor([2, 0]), torch.tensor([3, 5], dtype=torch.int32)
    out = flash.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=sl, cache_batch_idx=rows)
    for b in range(B):
        r, n = int(rows[b]), int(sl[b])
        assert torch.equal(kc[r, n], k[b, 0]) and torch.equal(vc[r, n], v[b, 0])
        keys = torch.cat([k0[r, :n], k[b]])
        vals = torch.cat([v0[r, :n], v[b]])
        assert torch.allclose(out[b].double(), _ref(q[b], keys, vals), atol=1e-5)
    assert torch.equal(kc[1], k0[1]) and torch.equal(vc[1], v0[1])  # the row not chosen
