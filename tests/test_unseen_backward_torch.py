"""Training through `tessera.runtime.autograd.attention` on round 23's unseen cases (CPU tensors, `level=`), against
float64 written here: tensors in [b, s, h, d] transposed to [b, h, s, d] views (and dO through a transposed
loss), GQA 4:1 and MQA (also K and V of one head expanded over four, stride 0), causal with more queries than keys
(zero gradients on the rows that see none), a loss over part of O, a loss that reads the LSE (`return_lse=True`;
two key halves merged by their LSEs as ring attention does, also causal with mask_mods, rows seeing no key in one
half; with a learned bias, whose gradient it reaches; a z-loss on the LSE alone), activation checkpointing over
q, k, v sliced from one projection, a learned full bias through a score_mod (dBias) and a detached one,
`deterministic=True` bit for bit over two steps, a two-layer toy model trained four SGD steps beside a float64
torch model, and the refusals: float64 inputs (gradcheck), a bias argument, dropout, head_dim 256 and
deterministic 192 (before the forward runs), and a second derivative (a gradient penalty under
`create_graph=True`, which silently lost its second-order terms before). About 12 s; under `-m slow` (about a
minute): only q requiring grad in f16 with a scale of the caller's and the toy model at target level, and a loss
that reads the LSE on the GPU path through the fake driver."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.runtime.attention_base import UnsupportedKernel
from test_unseen_backward import assert_close, backward64

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install -e '.[torch]')")
from tessera.runtime.autograd import SECOND_ORDER, attention  # noqa: E402 (PyTorch first)
import test_captured_gradients_gpu_path as gpu_path  # noqa: E402

fake_gpu, private_cache = gpu_path.fake_gpu, gpu_path.private_cache  # its fixtures: the fake driver, a private cache


def tensors(batch, heads, heads_k, seq_q, seq_k, head_dim, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, do = (torch.randn(batch, heads, seq_q, head_dim, generator=g).to(dtype) for _ in range(2))
    k, v = (torch.randn(batch, heads_k, seq_k, head_dim, generator=g).to(dtype) for _ in range(2))
    return q, k, v, do


def f64(x):
    return x.detach().double().numpy()


def check_grads(leaves, want, names=("dq", "dk", "dv")):
    for name, leaf, expected in zip(names, leaves, want):
        assert_close(leaf.grad.float().numpy(), expected, name)


def test_transposed_views_of_a_bshd_layout():
    q, k, v, do = tensors(1, 2, 2, 33, 47, 64)
    leaves = [x.transpose(1, 2).contiguous().requires_grad_() for x in (q, k, v)]  # [b, s, h, d]
    views = [x.transpose(1, 2) for x in leaves]
    assert not views[0].is_contiguous()
    o = attention(*views, causal=True, level="tile")
    (o.transpose(2, 3).float() * do.transpose(2, 3).float()).sum().backward()  # dO reaches it transposed
    want_o, _, *want = backward64(*map(f64, (q, k, v, do)), True)
    assert_close(o.detach().float().numpy(), want_o, "o")
    for name, leaf, expected in zip(("dq", "dk", "dv"), leaves, want):
        assert_close(leaf.grad.transpose(1, 2).float().numpy(), expected, name)


@pytest.mark.parametrize("heads_k", [1, 2])
def test_grouped_heads(heads_k):
    q, k, v, do = tensors(2, 8, heads_k, 65, 33, 64, seed=heads_k)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    attention(*leaves, level="tile").backward(do)
    check_grads(leaves, backward64(*map(f64, (q, k, v, do)))[2:])


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_over_q_k_v_sliced_from_one_projection(reentrant):
    """q, k, v column slices of one [b, h, s, 3d] tensor (row stride 3d), the attention recomputed in the backward
    by torch.utils.checkpoint: the slices' gradients land side by side in the projection's."""
    from torch.utils.checkpoint import checkpoint

    g = torch.Generator().manual_seed(6)
    qkv = torch.randn(1, 2, 30, 192, generator=g).to(torch.bfloat16).requires_grad_()
    do = torch.randn(1, 2, 30, 64, generator=g).to(torch.bfloat16)

    def attend(x):
        return attention(x[..., :64], x[..., 64:128], x[..., 128:], causal=True, level="tile")

    checkpoint(attend, qkv, use_reentrant=reentrant).backward(do)
    _, _, *want = backward64(f64(qkv[..., :64]), f64(qkv[..., 64:128]), f64(qkv[..., 128:]), f64(do), True)
    assert_close(qkv.grad.float().numpy(), np.concatenate(want, -1), "d qkv")


@pytest.mark.slow
def test_only_q_requires_grad_in_f16_with_a_scale_at_target_level():
    q, k, v, do = tensors(2, 4, 1, 19, 19, 64, dtype=torch.float16, seed=1)
    leaf = q.clone().requires_grad_()
    attention(leaf, k, v, causal=True, scale=0.3, level="target").backward(do)
    assert_close(leaf.grad.float().numpy(), backward64(*map(f64, (q, k, v, do)), True, 0.3)[2], "dq")
    assert k.grad is None and v.grad is None


def test_more_queries_than_keys_causal():
    q, k, v, do = tensors(1, 2, 1, 65, 3, 64)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    o = attention(*leaves, causal=True, level="tile")
    o.backward(do)
    assert not o[:, :, :62].any() and not leaves[0].grad[:, :, :62].any()  # rows 0 .. 61 see no key
    check_grads(leaves, backward64(*map(f64, (q, k, v, do)), True)[2:])


def test_a_loss_over_part_of_the_output():
    q, k, v, _ = tensors(1, 2, 2, 40, 40, 64)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    attention(*leaves, causal=True, level="tile")[:, :, 10:20, :5].float().sum().backward()
    do = np.zeros(q.shape)
    do[:, :, 10:20, :5] = 1
    check_grads(leaves, backward64(f64(q), f64(k), f64(v), do, True)[2:])


def test_a_learned_full_bias_through_a_score_mod():
    q, k, v, do = tensors(1, 2, 2, 17, 23, 64)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    bias = torch.randn(1, 2, 17, 23, generator=torch.Generator().manual_seed(5)).requires_grad_()
    attention(*leaves, causal=True, level="tile",
              score_mod=lambda s, b, h, q_idx, kv_idx: s + bias[b, h, q_idx, kv_idx]).backward(do)
    # the reference: the bias folded into q k^T through an extra feature (scores q.k / 8 + bias)
    q64, k64 = f64(q), f64(k)
    s = q64 @ np.swapaxes(k64, -1, -2) / 8 + f64(bias)
    s = np.where(np.arange(23)[None] <= np.arange(17)[:, None] + 6, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = p @ f64(v)
    ds = p * (f64(do) @ np.swapaxes(f64(v), -1, -2) - (f64(do) * o).sum(-1, keepdims=True))
    want = (ds @ k64 / 8, np.swapaxes(ds, -1, -2) @ q64 / 8, np.swapaxes(p, -1, -2) @ f64(do), ds)
    check_grads([*leaves, bias], want, ("dq", "dk", "dv", "dbias"))
    detached = bias.detach()
    leaf = q.clone().requires_grad_()
    attention(leaf, k, v, causal=True, level="tile",
              score_mod=lambda s, b, h, q_idx, kv_idx: s + detached[b, h, q_idx, kv_idx]).backward(do)
    assert_close(leaf.grad.float().numpy(), want[0], "dq, the bias detached")


def test_deterministic_steps_repeat_bit_for_bit():
    q, k, v, do = tensors(1, 4, 2, 130, 300, 64)
    runs = []
    for _ in range(2):
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        attention(*leaves, causal=True, deterministic=True, level="tile").backward(do)
        runs.append([leaf.grad.view(torch.int16) for leaf in leaves])
    assert all(torch.equal(a, b) for a, b in zip(*runs))


def test_the_lse_output_is_differentiable():
    """return_lse=True: (o, lse), and a loss that reads lse gets its gradient (it had none: autograd returned O
    alone, and tessera.attention's LSE refuses a backward)."""
    q, k, v, do = tensors(1, 4, 2, 33, 70, 64)
    dlse = torch.randn(1, 4, 33, generator=torch.Generator().manual_seed(7))
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    o, lse = attention(*leaves, causal=True, level="tile", return_lse=True)
    ((o.float() * do.float()).sum() + (lse * dlse).sum()).backward()
    _, want_lse, *want = backward64(*map(f64, (q, k, v, do)), True, dlse=f64(dlse))
    assert lse.dtype == torch.float32 and np.abs(lse.detach().numpy() - want_lse).max() < 1e-4
    check_grads(leaves, want)


def test_a_z_loss_on_the_lse_alone():
    """A loss on the LSE only (a z-loss): O's gradient is torch's zeros, dV is 0, dQ and dK come from dLSE alone."""
    q, k, v, _ = tensors(1, 2, 2, 33, 33, 64)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    _, lse = attention(*leaves, causal=True, level="tile", return_lse=True)
    (lse ** 2).mean().backward()
    dlse = 2 * f64(lse) / lse.numel()
    check_grads(leaves, backward64(f64(q), f64(k), f64(v), np.zeros(q.shape), True, dlse=dlse)[2:])
    assert not leaves[2].grad.any()


def test_the_lse_of_a_learned_bias_passes_its_gradient_to_the_bias_too():
    """With a score_mod, dLSE is in the modified scores' LSE, and so reaches the captured tensor's gradient."""
    q, k, v, do = tensors(1, 2, 2, 17, 17, 64, seed=2)
    g = torch.Generator().manual_seed(3)
    bias, dlse = torch.randn(1, 2, 17, 17, generator=g).requires_grad_(), torch.randn(1, 2, 17, generator=g)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    o, lse = attention(*leaves, level="tile", return_lse=True,
                       score_mod=lambda s, b, h, q_idx, kv_idx: s + bias[b, h, q_idx, kv_idx])
    ((o.float() * do.float()).sum() + (lse * dlse).sum()).backward()
    q64, k64, v64, do64 = map(f64, (q, k, v, do))
    s = q64 @ np.swapaxes(k64, -1, -2) / 8 + f64(bias)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ds = p * (do64 @ np.swapaxes(v64, -1, -2) - (do64 * (p @ v64)).sum(-1, keepdims=True) + f64(dlse)[..., None])
    check_grads([leaves[0], leaves[1], bias], (ds @ k64 / 8, np.swapaxes(ds, -1, -2) @ q64 / 8, ds),
                ("dq", "dk", "dbias"))


def test_mqa_by_an_expanded_key_head():
    """K and V of one head expanded (stride 0) over the query heads: torch sums the gradient back."""
    q, k, v, do = tensors(1, 4, 1, 17, 29, 64, seed=4)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    attention(leaves[0], *(x.expand(1, 4, 29, 64) for x in leaves[1:]), level="tile").backward(do)
    check_grads(leaves, backward64(*map(f64, (q, k, v, do)))[2:])


def test_two_key_halves_merged_by_their_lse_give_full_attentions_gradients():
    """Ring attention's merge: o = sum_i o_i exp(lse_i - logaddexp(lse_1, lse_2)); the gradients flow through both
    LSEs, and equal those of attention over all the keys."""
    q, k, v, do = tensors(1, 4, 2, 33, 70, 64)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    q_, k_, v_ = leaves
    (o1, lse1), (o2, lse2) = (attention(q_, k_[:, :, keys], v_[:, :, keys], level="tile", return_lse=True)
                              for keys in (slice(0, 35), slice(35, 70)))
    lse = torch.logaddexp(lse1, lse2)
    o = o1.float() * torch.exp(lse1 - lse)[..., None] + o2.float() * torch.exp(lse2 - lse)[..., None]
    (o * do.float()).sum().backward()
    want_o, _, *want = backward64(*map(f64, (q, k, v, do)))
    assert_close(o.detach().numpy(), want_o, "o")
    check_grads(leaves, want)


def test_causal_ring_attention_over_two_key_blocks():
    """Causal attention over 80 keys as ring attention computes it: the past block and the diagonal one, each with
    its mask_mod, merged by their LSEs; the diagonal block's first 40 rows see no key (LSE -inf, O 0), and no NaN
    comes back from them. The gradients are those of causal attention over all the keys."""
    n = 40
    q, k, v, do = tensors(1, 2, 2, 2 * n, 2 * n, 64)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    q_, k_, v_ = leaves
    o1, lse1 = attention(q_, k_[:, :, :n], v_[:, :, :n], level="tile", return_lse=True,
                         mask_mod=lambda b, h, q_idx, kv_idx: kv_idx <= q_idx)
    o2, lse2 = attention(q_, k_[:, :, n:], v_[:, :, n:], level="tile", return_lse=True,
                         mask_mod=lambda b, h, q_idx, kv_idx: kv_idx + n <= q_idx)
    assert torch.isneginf(lse2[:, :, :n]).all()
    lse = torch.logaddexp(lse1, lse2)
    o = o1.float() * torch.exp(lse1 - lse)[..., None] + o2.float() * torch.exp(lse2 - lse)[..., None]
    (o * do.float()).sum().backward()
    want_o, _, *want = backward64(*map(f64, (q, k, v, do)), True)
    assert_close(o.detach().numpy(), want_o, "o")
    check_grads(leaves, want)


HEADS, HEAD_DIM, SEQ = 2, 64, 24
WIDTH = HEADS * HEAD_DIM


class Layer(torch.nn.Module):
    """x + W_o attention(W_q x, W_k x, W_v x): q, k, v [b, h, s, d] permuted views of one projection."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(WIDTH, 3 * WIDTH, bias=False)
        self.out = torch.nn.Linear(WIDTH, WIDTH, bias=False)

    def forward(self, x, attend):
        batch, seq, _ = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
        return x + self.out(attend(q, k, v).transpose(1, 2).reshape(batch, seq, WIDTH))


def eager64(q, k, v):
    s = q @ k.transpose(-1, -2) / HEAD_DIM ** 0.5
    visible = torch.ones(s.shape[-2:], dtype=torch.bool).tril()
    return torch.softmax(s.masked_fill(~visible, float("-inf")), -1) @ v


def train(level: str, steps: int):
    torch.manual_seed(0)
    model = torch.nn.Sequential(Layer(), Layer())
    reference = torch.nn.Sequential(Layer(), Layer()).double()
    reference.load_state_dict({name: w.double() for name, w in model.state_dict().items()})
    x, y = torch.randn(1, SEQ, WIDTH) * 0.5, torch.randn(1, SEQ, WIDTH) * 0.5

    def tessera_attention(q, k, v):
        return attention(*(t.to(torch.bfloat16) for t in (q, k, v)), causal=True, level=level).to(q.dtype)

    def run(net, attend, x, y):
        out = x
        for layer in net:
            out = layer(out, attend)
        return ((out - y) ** 2).mean()

    optimizers = [torch.optim.SGD(net.parameters(), lr=0.5) for net in (model, reference)]
    losses = []
    for _ in range(steps):
        loss = run(model, tessera_attention, x, y)
        want = run(reference, eager64, x.double(), y.double())
        for optimizer in optimizers:
            optimizer.zero_grad()
        loss.backward()
        want.backward()
        for w, w64 in zip(model.parameters(), reference.parameters()):
            assert_close(w.grad.numpy(), w64.grad.numpy(), "a weight's gradient", tol=0.02)
        assert abs(loss.item() - want.item()) < 1e-4 * want.item()
        losses.append(loss.item())
        for optimizer in optimizers:
            optimizer.step()
    assert all(b < a for a, b in zip(losses, losses[1:])), losses


def test_a_two_layer_model_trains_as_its_float64_twin():
    train("tile", 4)


@pytest.mark.slow
def test_a_two_layer_model_trains_as_its_float64_twin_at_target_level():
    train("target", 2)


def test_float64_inputs_are_refused_by_name_so_gradcheck_is():
    q, k, v, _ = tensors(1, 1, 1, 3, 3, 64, dtype=torch.float64)
    leaves = [x.requires_grad_() for x in (q, k, v)]
    with pytest.raises(UnsupportedKernel, match="element type float64 is not supported"):
        torch.autograd.gradcheck(lambda q, k, v: attention(q, k, v, level="tile"), leaves)


BIAS_REFUSED = "bias is not supported with autograd.*a score_mod that adds it"  # names the way that has a backward


@pytest.mark.parametrize("options, error, message", [
    (dict(bias=torch.zeros(1, 2, 16, 16, requires_grad=True)), ValueError, BIAS_REFUSED),
    (dict(bias=torch.zeros(1, 2, 16, 16)), ValueError, BIAS_REFUSED),
    (dict(dropout_p=0.1), TypeError, "dropout_p"),
    (dict(return_lse=1), ValueError, "return_lse must be True or False"),
])
def test_refused_options(options, error, message):
    q, k, v, _ = tensors(1, 2, 2, 16, 16, 64)
    with pytest.raises(error, match=message):
        attention(*(x.requires_grad_() for x in (q, k, v)), level="tile", **options)


@pytest.mark.parametrize("head_dim, deterministic, error, message", [
    (256, False, UnsupportedKernel, "head_dim 256 is not supported by the backward kernels"),
    (192, True, ValueError, "head_dim 192 is not supported by the attention backward with deterministic=True"),
])
def test_a_backward_no_kernel_computes_is_refused_before_the_forward(monkeypatch, head_dim, deterministic, error,
                                                                     message):
    """Refused where the forward would run (it ran, compiled, and the step failed in its backward); without grad
    the forward runs as ever."""
    import tessera.runtime.attention as forward

    q = tensors(1, 1, 1, 8, 8, head_dim)[0]
    calls = []
    monkeypatch.setattr(forward, "attention", lambda q, *args, **kwargs: calls.append(1) or (q, q[..., 0].float()))
    with pytest.raises(error, match=message):
        attention(q.clone().requires_grad_(), q, q, level="tile", deterministic=deterministic)
    assert not calls
    with torch.no_grad():
        attention(q.clone().requires_grad_(), q, q, level="tile", deterministic=deterministic)
    assert calls


@pytest.mark.parametrize("loss", ["linear", "square"])
def test_a_second_derivative_is_refused_by_name(loss):
    """A gradient penalty: the gradients computed under create_graph=True came back as constants (linear loss:
    dO needs no grad) or with no graph at all, so the penalty's second-order terms were silently dropped. Now
    differentiating them raises SECOND_ORDER; first-order gradients under create_graph=True are unchanged."""
    q, k, v, do = tensors(1, 2, 2, 8, 8, 64)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    o = attention(*leaves, level="tile")
    objective = (o.float() * do.float()).sum() if loss == "linear" else (o.float() ** 2).sum() / 2
    (dq,) = torch.autograd.grad(objective, leaves[0], create_graph=True)
    if loss == "linear":
        assert_close(dq.detach().float().numpy(), backward64(*map(f64, (q, k, v, do)))[2], "dq")
    with pytest.raises(RuntimeError, match="has no second derivative"):
        (dq.float() ** 2).sum().backward()
    assert "create_graph=True" in SECOND_ORDER


@pytest.mark.slow
def test_a_loss_that_reads_the_lse_on_the_gpu_path(fake_gpu):
    """`dlse` on the GPU path, through the fake driver (the PTX the runtime loads, in the PTX executor): NumPy
    arrays, and pretend CUDA tensors (dPsum less dLSE on the device, between the preprocess and the main kernel)."""
    from test_unseen_backward import problem

    import tessera

    _, fake = fake_gpu
    q, k, v, o, lse, do = problem(1, 2, 1, 20, 9, 64, causal=True)
    dlse = np.random.default_rng(1).standard_normal(lse.shape).astype(np.float32)
    _, _, *want = backward64(q, k, v, do, True, dlse=dlse)
    on_device = [gpu_path._on_device(fake, x) for x in (q, k, v, o, lse, do, dlse)]
    for grads in (tessera.attention_backward(q, k, v, o, lse, do, causal=True, dlse=dlse),
                  tessera.attention_backward(*on_device[:6], causal=True, dlse=on_device[6])):
        for name, grad, expected in zip(("dq", "dk", "dv"), grads, want):
            assert_close(np.asarray(grad.float().numpy() if isinstance(grad, torch.Tensor) else grad), expected, name)
