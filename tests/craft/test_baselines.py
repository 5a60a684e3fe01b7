"""Card tests 13 (EdgeBank) and 14 (TGN): behaviour that must fail on a wrong implementation."""

import copy

import numpy as np
import pytest
import torch

from zoo.craft.edgebank import EdgeBank, edgebank_rr_closed_form
from zoo.craft.tgn import TGNNet

torch.set_num_threads(1)


def reference_rr(scores: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """TGB tie-averaged RR, column 0 the positive: 1 / (1 + 0.5 * (#{neg > pos} + #{neg >= pos})) over unmasked."""
    pos, neg = scores[:, :1], scores[:, 1:]
    rank = 1.0 + 0.5 * (((neg > pos) & mask).sum(1) + ((neg >= pos) & mask).sum(1))
    return 1.0 / rank


class DictEdgeBank:
    """Slow reference: TGB's dict-based EdgeBankPredictor logic (fixed_time_window slides with the newest edge)."""

    def __init__(self, mode: str, ratio: float, src, dst, t) -> None:
        self.mode, self.memory = mode, {}
        t_start, t_end = float(min(t)), float(max(t))
        prev_t = t_start + (t_end - t_start) * (1.0 - ratio)
        self.cur_t, self.duration = t_end, t_end - prev_t
        self.insert(src, dst, t)

    def insert(self, src, dst, t) -> None:
        self.cur_t = max(self.cur_t, float(max(t)))
        for u, v, ts in zip(src.tolist(), dst.tolist(), t.tolist()):
            self.memory[(u, v)] = max(ts, self.memory.get((u, v), -np.inf))

    def score(self, src, cand) -> np.ndarray:
        out = np.zeros(cand.shape)
        for i, u in enumerate(src.tolist()):
            for j, v in enumerate(cand[i].tolist()):
                if (u, v) in self.memory and (
                    self.mode == "unlimited" or self.memory[(u, v)] >= self.cur_t - self.duration
                ):
                    out[i, j] = 1.0
        return out


# ------------------------------------------------------------------------------------------------ 13: EdgeBank
def test_edgebank_c3_closed_form_hand_made_stream():
    """C3: per-edge RR is exactly 1/(1+m/2) if the positive is in memory, else 1/(1+(m+K)/2), with masked negatives
    ignored. Catches a wrong tie rule (optimistic/pessimistic rank), counting padded negatives, or an undirected
    memory ((5,1) must not count as (1,5))."""
    bank = EdgeBank("unlimited")
    bank.fit(np.array([1, 1, 2, 3]), np.array([5, 6, 5, 7]), np.array([0.0, 1.0, 2.0, 3.0]))
    seen = {(1, 5), (1, 6), (2, 5), (3, 7)}
    batches = [
        # (src, dst, neg (B,4), mask (B,4))
        (
            np.array([1, 2, 5]),
            np.array([5, 6, 1]),
            np.array([[6, 7, 8, 0], [5, 5, 7, 9], [6, 7, 8, 9]]),
            np.array([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]], bool),
        ),
        (
            np.array([2, 3, 1]),
            np.array([6, 7, 9]),
            np.array([[5, 8, 0, 0], [5, 6, 8, 9], [5, 6, 0, 0]]),
            np.array([[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]], bool),
        ),
    ]
    expected_rr = [
        [1 / 1.5, 1 / (1 + (2 + 4) / 2), 1 / (1 + 4 / 2)],  # (1,5) seen, m=1; (2,6) unseen, m=2, K=4; (5,1) unseen
        [1 / 1.5, 1.0, 1 / (1 + (2 + 2) / 2)],  # (2,6) inserted after batch 1 -> seen; (1,9) unseen, K=2 unmasked
    ]
    for (src, dst, neg, mask), want in zip(batches, expected_rr):
        cand = np.concatenate([dst[:, None], neg], 1)
        rr = reference_rr(bank.score(src, cand, np.zeros(len(src))), mask)
        in_memory = np.array([(u, v) in seen for u, v in zip(src, dst)])
        m = np.array([sum((u, v) in seen for v, ok in zip(row, mrow) if ok) for u, row, mrow in zip(src, neg, mask)])
        np.testing.assert_allclose(rr, edgebank_rr_closed_form(in_memory, m, mask.sum(1)), rtol=0, atol=1e-12)
        np.testing.assert_allclose(rr, want, rtol=0, atol=1e-12)
        bank.insert(src, dst, np.full(len(src), 10.0))
        seen |= set(zip(src.tolist(), dst.tolist()))


@pytest.mark.parametrize("mode", ["unlimited", "time_window"])
def test_edgebank_matches_dict_reference_on_random_stream(mode):
    """Vectorised sorted-key memory (with its delta buffer merged past 4096 keys) = TGB's dict loop, and every
    unseen positive takes the second C3 form. Catches key collisions, a stale delta buffer after merging, keeping
    the first instead of the last time of a pair, and a window that does not slide (or slides to the query time)."""
    rng = np.random.default_rng(0)
    n, n_fit, b, k = 12_000, 4_000, 200, 20
    src, dst = rng.integers(1, 40, n), rng.integers(40, 300, n)
    t = np.sort(rng.uniform(0, 1e6, n)) + 1.7e9
    bank = EdgeBank(mode, window_ratio=0.15)
    bank.fit(src[:n_fit], dst[:n_fit], t[:n_fit])
    ref = DictEdgeBank(mode, 0.15, src[:n_fit], dst[:n_fit], t[:n_fit])
    for i in range(n_fit, n, b):
        sl = slice(i, i + b)
        cand = np.concatenate([dst[sl, None], rng.integers(40, 300, (b, k))], 1)
        got = bank.score(src[sl], cand, t[sl])
        np.testing.assert_array_equal(got, ref.score(src[sl], cand))
        in_memory = got[:, 0] == 1.0
        rr = reference_rr(got, np.ones((b, k), bool))
        np.testing.assert_allclose(rr, edgebank_rr_closed_form(in_memory, got[:, 1:].sum(1), k), rtol=0, atol=1e-12)
        bank.insert(src[sl], dst[sl], t[sl])
        ref.insert(src[sl], dst[sl], t[sl])
    assert bank._keys.size > 4096  # the merge path ran


def test_edgebank_time_window_forgets_old_edges():
    """Time-window mode keeps only pairs last seen in the last 15% of the fitted span and slides with new edges;
    unlimited keeps everything. Catches a window anchored at t_start, one that never slides, or using first-seen
    times."""
    src, dst = np.array([1, 2, 3, 1]), np.array([10, 20, 30, 40])
    t = np.array([0.0, 10.0, 90.0, 100.0])  # window [85, 100]
    tw, unl = EdgeBank("time_window", 0.15), EdgeBank("unlimited")
    for bank in (tw, unl):
        bank.fit(np.r_[src, 2], np.r_[dst, 20], np.r_[t, 95.0])  # (2,20) seen at 10 and again at 95
    q_src, q_cand = np.array([1, 2, 3, 1]), np.array([[10], [20], [30], [40]])
    assert tw.window_start == pytest.approx(85.0)
    np.testing.assert_array_equal(tw.score(q_src, q_cand)[:, 0], [0, 1, 1, 1])
    np.testing.assert_array_equal(unl.score(q_src, q_cand)[:, 0], [1, 1, 1, 1])
    for bank in (tw, unl):
        bank.insert(np.array([5]), np.array([50]), np.array([200.0]))  # window slides to [185, 200]
    assert tw.window_start == pytest.approx(185.0)
    np.testing.assert_array_equal(tw.score(np.r_[q_src, 5], np.r_[q_cand, [[50]]])[:, 0], [0, 0, 0, 0, 1])
    np.testing.assert_array_equal(unl.score(np.r_[q_src, 5], np.r_[q_cand, [[50]]])[:, 0], [1, 1, 1, 1, 1])


def test_edgebank_score_then_insert():
    """A positive counts only for later batches: scoring does not insert, and a pair repeated inside one batch is
    unseen for both rows. Catches inserting before scoring (a leak that turns RR into 1/(1+m/2) everywhere)."""
    bank = EdgeBank()
    bank.fit(np.array([1]), np.array([2]), np.array([0.0]))
    src, dst = torch.tensor([3, 3]), torch.tensor([4, 4])
    cand = torch.stack([dst, torch.tensor([2, 2])], 1)
    first = bank.score(src, cand, torch.tensor([1.0, 1.0]))
    assert isinstance(first, torch.Tensor) and first.dtype == torch.float32
    assert first[:, 0].tolist() == [0.0, 0.0]
    assert bank.score(src, cand)[:, 0].tolist() == [0.0, 0.0]  # scoring twice inserts nothing
    bank.insert(src, dst, torch.tensor([1.0, 1.0]))
    assert bank.score(src, cand)[:, 0].tolist() == [1.0, 1.0]
    assert bank.score(torch.tensor([4]), torch.tensor([[3]]))[0, 0].item() == 0.0  # directed
    big = 1_000_003  # u * 10**6 + v style keys would collide: (1, 1_000_003) vs (2, 3)
    bank.insert(np.array([1]), np.array([big]), np.array([2.0]))
    np.testing.assert_array_equal(bank.score(np.array([1, 2]), np.array([[big], [3]]))[:, 0], [1.0, 0.0])


# ------------------------------------------------------------------------------------------------ 14: TGN
N_USERS, N_ITEMS = 20, 40
U, N = N_USERS, N_USERS + N_ITEMS + 1


def _stream(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(1, U + 1, (n,), generator=g)
    dst = torch.randint(U + 1, N, (n,), generator=g)
    t = torch.sort(torch.rand(n, generator=g, dtype=torch.float64) * 1e4).values
    return src, dst, t, torch.randn(n, 2, generator=g)


def _train(net: TGNNet, opt: torch.optim.Optimizer, data, lo: int, hi: int, b: int, seed: int) -> list[float]:
    src, dst, t, msg = data
    g = torch.Generator().manual_seed(seed)
    losses = []
    for i in range(lo, hi, b):
        sl = slice(i, min(i + b, hi))
        neg = torch.randint(U + 1, N, (sl.stop - sl.start,), generator=g)
        opt.zero_grad()
        loss = net.train_loss(src[sl], dst[sl], neg, t[sl], msg[sl])
        loss.backward()
        opt.step()
        net.detach_memory()
        losses.append(loss.item())
    return losses


def _assert_state_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and torch.equal(x, y), key
        elif isinstance(x, dict):
            assert x.keys() == y.keys(), key
            assert all(all(torch.equal(p, q) for p, q in zip(x[j], y[j])) for j in x), key
        else:
            assert x == y, key


@pytest.fixture(scope="module")
def trained():
    torch.manual_seed(0)
    data = _stream(600, seed=1)
    net = TGNNet(N, msg_dim=2, memory_dim=16, time_dim=16, embedding_dim=16, num_neighbors=5)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    net.train()
    net.reset_state()
    _train(net, opt, data, 0, 400, 50, seed=2)
    return net, opt, data


def test_tgn_batched_score_equals_per_positive_loop(trained):
    """Batched eval (unique nodes embedded once, all (B, 1+K) pairs scored) = TGB's per-positive loop within 1e-5,
    with repeated sources, duplicate candidates and padding id 0. Catches broadcasting the wrong source onto a
    candidate row, mis-mapping global to local ids, or neighbour edges leaking between positives."""
    net, _, (src, dst, t, msg) = trained
    net.eval()
    state = net.backup_state()
    g = torch.Generator().manual_seed(3)
    for i in range(400, 600, 50):
        sl = slice(i, i + 50)
        neg = torch.randint(U + 1, N, (50, 12), generator=g)
        neg[:, -2:] = 0  # padding
        neg[:, 0] = neg[:, 1]  # duplicate candidate
        cand = torch.cat([dst[sl, None], neg], 1)
        batched = net.score(src[sl], cand, t[sl])
        assert batched.shape == (50, 13) and torch.isfinite(batched).all()
        torch.testing.assert_close(batched, net.score_loop(src[sl], cand, t[sl]), rtol=0, atol=1e-5)
        assert torch.equal(net.score(src[sl], cand, t[sl]), batched)  # scoring leaves state alone
        net.observe(src[sl], dst[sl], t[sl], msg[sl])
    net.restore_state(state)
    net.train()


def test_tgn_backup_observe_restore_is_bit_identical(trained):
    """Memory, last_update, message stores, neighbour buffers and event store are bit-identical after backup ->
    observe/score -> restore, and training then continues exactly as without the detour. Catches a shallow backup
    (aliasing the live buffers), forgetting cur_e_id or the event store, or restoring into the wrong device/tensor."""
    net, opt, (src, dst, t, msg) = trained
    opt_state = copy.deepcopy(opt.state_dict())
    params = {k: v.clone() for k, v in net.state_dict().items()}

    def detour(with_val: bool) -> list[float]:
        net.load_state_dict(params)
        opt.load_state_dict(copy.deepcopy(opt_state))  # Adam updates its state tensors in place
        net.train()
        net.reset_state()
        torch.manual_seed(4)  # same dropout draws in both runs
        _train(net, opt, (src, dst, t, msg), 0, 300, 50, seed=4)
        net.eval()  # flushes pending messages, as Lightning's eval() does before the backup hook
        before = net.backup_state()
        if with_val:
            for i in range(300, 450, 50):
                sl = slice(i, i + 50)
                net.score(src[sl], torch.stack([dst[sl], src[sl]], 1), t[sl])
                net.observe(src[sl], dst[sl], t[sl], msg[sl])
            changed = net.backup_state()
            assert not torch.equal(changed["memory"], before["memory"])
            assert changed["nl_cur_e_id"] > before["nl_cur_e_id"]
            net.restore_state(before)
            _assert_state_equal(net.backup_state(), before)
        net.train()
        torch.manual_seed(5)
        return _train(net, opt, (src, dst, t, msg), 300, 450, 50, seed=6)

    assert detour(with_val=True) == detour(with_val=False)


def test_tgn_refuses_out_of_order_events():
    """A shuffled loader is refused: events unsorted within a batch, or older than the state, raise; reset_state()
    starts over. Catches silently corrupting memory with a shuffled DataLoader."""
    net = TGNNet(N, msg_dim=2, memory_dim=8, time_dim=8, embedding_dim=8)
    src, dst, t, msg = _stream(20, seed=7)
    net.observe(src[10:], dst[10:], t[10:], msg[10:])
    with pytest.raises(ValueError, match="out of time order"):
        net.observe(src[:10], dst[:10], t[:10], msg[:10])
    with pytest.raises(ValueError, match="out of time order"):
        net.train_loss(src[:5], dst[:5], dst[:5], t[:5].flip(0), msg[:5])
    net.reset_state()
    net.train_loss(src[:10], dst[:10], dst[:10], t[:10], msg[:10])


def test_tgn_tiny_training_run_decreases_loss():
    """20 optimiser steps (4 epochs x 5 batches) on a stream where 5 items take every positive: the last epoch's
    mean loss sits well below the first, and afterwards the positives outscore never-used items. Catches a broken
    gradient path (loss stuck near 2 ln 2) and wrong labels (the loss falls, but negatives win)."""
    torch.manual_seed(0)
    i = torch.arange(250)
    src = i % U + 1
    dst = U + 1 + (src % 5)
    data = (src, dst, i.double() * 3.0, torch.ones(250, 2))
    net = TGNNet(N, msg_dim=2, memory_dim=16, time_dim=16, embedding_dim=16, num_neighbors=5)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    epochs = []
    for epoch in range(4):
        net.train()
        net.reset_state()
        epochs.append(np.mean(_train(net, opt, data, 0, 250, 50, seed=epoch)))
    assert epochs[0] > 1.1 and epochs[-1] < epochs[0] - 0.2, epochs
    net.eval()
    cand = torch.cat([dst[:50, None], torch.arange(U + 6, N).expand(50, -1)], 1)  # items U+6.. never positive
    logits = net.score(src[:50], cand, data[2][:50])
    assert (logits[:, :1] > logits[:, 1:]).float().mean() > 0.9
    assert logits[:, 0].sigmoid().mean() > 0.5 > logits[:, 1:].sigmoid().mean()  # labels: negatives pushed to 0
