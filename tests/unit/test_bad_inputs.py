"""Bad inputs, part 1: the tensors themselves (issue 32).

Each case compiles a small function or module with
``torch.compile(..., backend="mybackend")`` and checks that it gives eager's
result, or the error eager (or torch) gives, never a crash or a silently
wrong value: empty and 0-d tensors, strided and channels-last inputs, outputs
that alias inputs, inputs mutated in place, NaN and Inf, mixed
``requires_grad``, grad modes, custom autograd Functions and double
backward. CPU only, tiny tensors. Strict mode throughout: a graph that fell
back to eager would raise instead of passing unnoticed, and each case also
checks that the core compiled at least one graph (``_compiled``).

Part 2 (tests/unit/test_bad_inputs_runtime.py): RNG, hooks, copies and
pickles, kernel cache folders, threads, recompilation limits.
docs/debugging.md, "Bad inputs", sums both up.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tests.testing import assert_same, compiled_records

STRICT = {"strict": True}


def _compile(fn: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
    return torch.compile(fn, backend="mybackend", options=STRICT, **kwargs)


def _compiled(fn: Callable[[], Any]) -> Any:
    """Runs fn and checks that the core compiled the graphs it traced (no
    fallback, at least one graph), so that a case never passes by running
    eagerly."""
    result, records = compiled_records(fn)
    assert records, "nothing was compiled"
    for record in records:
        assert record.has_core_report, (record.name, record.fallback_reason)
    return result


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())


# --- zero-size and 0-d tensors ----------------------------------------------


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_zero_rows_through_linear_and_relu(grad: bool) -> None:
    module = _mlp()
    compiled = _compile(module)
    x = torch.randn(0, 8, requires_grad=grad)
    out = _compiled(lambda: compiled(x))
    expected = module(x)
    assert out.shape == expected.shape == (0, 4)
    assert out.stride() == expected.stride()
    if grad:
        out.sum().backward()
        assert x.grad is not None and x.grad.shape == (0, 8)
        # No rows: every parameter gradient is an exact zero, as in eager.
        for p in module.parameters():
            assert p.grad is not None
            assert torch.equal(p.grad, torch.zeros_like(p))


def test_sum_over_an_empty_dim() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return x.sum(dim=0) + 1, x.sum(dim=1), x.mean(dim=0)

    compiled = _compile(fn, dynamic=False)
    for x in (torch.randn(0, 3), torch.randn(2, 0)):
        out = _compiled(lambda x=x: compiled(x))
        expected = fn(x)
        # mean over no elements is NaN in eager: the same here.
        for a, e in zip(out, expected, strict=True):
            assert a.shape == e.shape
            torch.testing.assert_close(a, e, equal_nan=True)


def test_zero_d_tensors() -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x * y + 1).sin()

    compiled = _compile(fn, dynamic=False)
    x, y = torch.tensor(2.0, requires_grad=True), torch.tensor(3.0, requires_grad=True)
    out = _compiled(lambda: compiled(x, y))
    assert out.dim() == 0
    out.backward()
    grads = (x.grad, y.grad)
    x.grad = y.grad = None
    expected = fn(x, y)
    expected.backward()
    assert_same(out, expected)
    assert_same(grads, (x.grad, y.grad))
    # A 0-d tensor broadcast against a vector.
    vector = torch.randn(3)
    assert_same(_compiled(lambda: compiled(x.detach(), vector)), fn(x.detach(), vector))


# --- strides: non-contiguous and channels-last inputs -------------------------


def _strided_inputs() -> dict[str, torch.Tensor]:
    base = torch.randn(6, 8)
    return {
        "transposed": base.t(),
        "stepped": base[::2, 1::3],
        "offset": base[2:, 3:],
        "expanded": torch.randn(1, 5).expand(4, 5),  # stride 0
    }


ELEMENTWISE = {
    "relu": lambda x: torch.relu(x) * 2 + 1,
    "softmax": lambda x: torch.softmax(x, -1),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "sum": lambda x: x.sum(0),
    "matmul": lambda x: x @ torch.ones(x.shape[-1], 2),
    "clone": lambda x: x.clone() * 1,
}


@pytest.mark.parametrize("op", sorted(ELEMENTWISE))
def test_strided_inputs_give_eagers_values_and_strides(op: str) -> None:
    fn = ELEMENTWISE[op]
    compiled = _compile(fn, dynamic=False)
    for name, x in _strided_inputs().items():
        out = _compiled(lambda x=x: compiled(x))
        expected = fn(x)
        torch.testing.assert_close(out, expected, msg=lambda m, name=name: f"{name}: {m}")
        assert out.stride() == expected.stride(), (name, out.stride(), expected.stride())


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.conv2 = torch.nn.Conv2d(4, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(torch.relu(self.bn(self.conv1(x))))


def _image_inputs() -> dict[str, torch.Tensor]:
    x = torch.randn(2, 3, 6, 6)
    return {
        "channels_last": x.to(memory_format=torch.channels_last),
        "transposed": x.transpose(2, 3),
        "stepped": torch.randn(2, 3, 12, 6)[:, :, ::2],
    }


@pytest.mark.parametrize("layout", sorted(_image_inputs()))
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_conv_net_keeps_eagers_layout(layout: str, train: bool) -> None:
    net = ConvNet().train(train)
    reference = copy.deepcopy(net)
    compiled = _compile(net)
    x = _image_inputs()[layout].requires_grad_(train)
    x_ref = x.detach().clone(memory_format=torch.preserve_format).requires_grad_(train)
    with torch.set_grad_enabled(train):
        out = _compiled(lambda: compiled(x))
        expected = reference(x_ref)
    torch.testing.assert_close(out, expected)
    assert out.stride() == expected.stride()
    if not train:
        return
    out.square().sum().backward()
    expected.square().sum().backward()
    assert x.grad is not None and x_ref.grad is not None
    torch.testing.assert_close(x.grad, x_ref.grad)
    assert x.grad.stride() == x_ref.grad.stride()
    for (name, p), q in zip(net.named_parameters(), reference.parameters(), strict=True):
        assert p.grad is not None and q.grad is not None
        torch.testing.assert_close(p.grad, q.grad, msg=lambda m, name=name: f"{name}: {m}")
        assert p.grad.stride() == q.grad.stride(), name
    torch.testing.assert_close(net.bn.running_mean, reference.bn.running_mean)
    torch.testing.assert_close(net.bn.running_var, reference.bn.running_var)


# --- outputs that alias inputs, inputs mutated in place -------------------------


def _aliases(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x, x.view(-1), x[1:], x.t(), x + 1


def _alias_facts(x: torch.Tensor, outs: tuple[torch.Tensor, ...]) -> list[tuple[Any, ...]]:
    """What a caller can observe of each output's relation to the input."""
    storage = x.untyped_storage().data_ptr()
    return [
        (
            o is x,
            o._base is x,
            o._is_view(),
            o.untyped_storage().data_ptr() == storage,  # shares x's memory
            o.storage_offset() if o.untyped_storage().data_ptr() == storage else None,
            o.stride(),
        )
        for o in outs
    ]


@pytest.mark.parametrize("grad", [False, True])
def test_outputs_alias_their_input_as_in_eager(grad: bool) -> None:
    compiled = _compile(_aliases)
    x = torch.randn(3, 4, requires_grad=grad)
    outs = _compiled(lambda: compiled(x))
    expected = _aliases(x)
    assert_same(outs, expected)
    assert _alias_facts(x, outs) == _alias_facts(x, expected)
    if not grad:  # the views are live: a later write to x shows through them
        with torch.no_grad():
            x.add_(5)
        assert_same(outs[:4], _aliases(x)[:4])


def test_input_mutations_are_visible_to_the_caller() -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x.add_(1)
        y.mul_(2)
        return x * y, x.view(-1)

    compiled = _compile(fn)
    x, y = torch.randn(3, 2), torch.randn(3, 2)
    x_ref, y_ref = x.clone(), y.clone()
    out = _compiled(lambda: compiled(x, y))
    expected = fn(x_ref, y_ref)
    assert_same(out, expected)
    assert torch.equal(x, x_ref) and torch.equal(y, y_ref)
    assert x._version == x_ref._version and y._version == y_ref._version
    assert out[1]._base is x


def test_mutations_through_overlapping_views_and_a_repeated_input() -> None:
    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.mul_(2)
        return a + b

    compiled = _compile(fn)
    base, base_ref = torch.arange(6.0), torch.arange(6.0)
    out = _compiled(lambda: compiled(base[0:4], base[2:6]))
    assert_same(out, fn(base_ref[0:4], base_ref[2:6]))
    assert torch.equal(base, base_ref)
    # The same tensor as both arguments: b sees a's mutation.
    x, x_ref = torch.ones(3), torch.ones(3)
    assert_same(compiled(x, x), fn(x_ref, x_ref))
    assert torch.equal(x, x_ref)


def test_batch_norm_running_stats_update_in_train_mode() -> None:
    module = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    reference = copy.deepcopy(module)
    compiled = _compile(module)
    x = torch.randn(8, 4)
    for step in range(2):  # a training call, then one under no_grad (still train mode)
        with torch.set_grad_enabled(step == 0):
            out = _compiled(lambda: compiled(x))
            expected = reference(x)
        torch.testing.assert_close(out, expected)
        for name, buffer in module[1].named_buffers():
            torch.testing.assert_close(buffer, getattr(reference[1], name), msg=name)
    assert int(module[1].num_batches_tracked) == 2


def test_in_place_on_a_leaf_that_requires_grad_raises_eagers_error() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.mul_(2)

    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        fn(torch.ones(3, requires_grad=True))
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        _compile(fn)(torch.ones(3, requires_grad=True))


# --- NaN and Inf ------------------------------------------------------------------

NAN, INF = float("nan"), float("inf")


def _nan_ops(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (
        torch.relu(x) * 2,
        x.sum(-1),
        x.amax(-1),
        torch.softmax(x, -1),
        x.exp() - 1,
        F.layer_norm(x, (4,)),
        torch.clamp(x, -1, 1),
        torch.maximum(x, torch.zeros_like(x)),
        torch.where(x > 0, x, 0.0),
    )


def test_nan_and_inf_propagate_as_in_eager() -> None:
    x = torch.tensor([[1.0, NAN, -INF, INF], [0.5, -2.0, INF, -INF], [1.0, 2.0, 3.0, 4.0]])
    compiled = _compile(_nan_ops)
    out = _compiled(lambda: compiled(x))
    for i, (a, e) in enumerate(zip(out, _nan_ops(x), strict=True)):
        torch.testing.assert_close(a, e, equal_nan=True, msg=lambda m, i=i: f"op {i}: {m}")
    linear = torch.nn.Linear(4, 3)
    out = _compiled(lambda: _compile(linear)(x))
    torch.testing.assert_close(out, linear(x), equal_nan=True)


# --- autograd: mixed requires_grad, grad modes, custom Functions ----------------


def test_mixed_requires_grad_inputs() -> None:
    def fn(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return (a * b).sum() + (b * c).sin().sum()

    compiled = _compile(fn)
    a, b, c = torch.randn(3, requires_grad=True), torch.randn(3), torch.randn(3, requires_grad=True)
    out = _compiled(lambda: compiled(a, b, c))
    out.backward()
    grads = (a.grad, c.grad)
    a.grad = c.grad = None
    fn(a, b, c).backward()
    assert_same(grads, (a.grad, c.grad))
    assert b.grad is None


def test_no_grad_and_inference_mode_calls_of_a_training_module() -> None:
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    compiled = _compile(module)
    x = torch.randn(5, 4)
    assert _compiled(lambda: compiled(x)).requires_grad
    for context in (torch.no_grad, torch.inference_mode):
        with context():
            out = _compiled(lambda: compiled(x))
            expected = module(x)
        assert_same(out, expected)
        assert not out.requires_grad
        assert out.is_inference() == expected.is_inference()
    # Training still works afterwards, with eager's gradients.
    compiled(x).sum().backward()
    grads = [p.grad.clone() for p in module.parameters() if p.grad is not None]
    module.zero_grad()
    module(x).sum().backward()
    assert_same(grads, [p.grad for p in module.parameters()])


class ScaledRelu(torch.autograd.Function):
    """A Function whose backward is not the derivative of its forward (3x
    the ReLU's gradient): the compiled backward must run this one, not one
    derived from the forward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.scale = scale
        return x.clamp(min=0) * scale

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (x,) = ctx.saved_tensors
        return grad * (x > 0).to(grad.dtype) * ctx.scale * 3, None


def test_custom_autograd_function_forward_and_backward() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return (ScaledRelu.apply(x * 2, 1.5) + x).sum()

    compiled = _compile(fn)
    x = torch.randn(6, requires_grad=True)
    out = _compiled(lambda: compiled(x))
    out.backward()
    grad = x.grad
    x.grad = None
    expected = fn(x)
    expected.backward()
    assert_same(out, expected)
    assert_same(grad, x.grad)


def test_double_backward_raises_torchs_clear_error() -> None:
    """aot_autograd's compiled graphs have no double backward: the first
    gradient (create_graph=True) is right, the second raises torch's own
    error, the same under mybackend as under backend="aot_eager"."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return (x.sin() * x).sum()

    x = torch.randn(5, requires_grad=True)
    (expected,) = torch.autograd.grad(fn(x), x, create_graph=True)
    messages = {}
    for backend in ("aot_eager", "mybackend"):
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend=backend)
        (grad,) = torch.autograd.grad(compiled(x), x, create_graph=True)
        assert_same(grad, expected)
        with pytest.raises(RuntimeError, match="does not currently support double backward") as e:
            torch.autograd.grad(grad.sum(), x)
        messages[backend] = str(e.value)
    assert messages["mybackend"] == messages["aot_eager"]
