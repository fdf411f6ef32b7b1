"""softmax() on the GPU: correct through the dispatch, inside torch.compile and CUDA-graph capture."""
from __future__ import annotations

import math

import pytest

from kernels.reference import check_softmax, random_input

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("m, n", [(1, 1), (5, 7), (64, 1000), (4, 32000), (2, 50257), (1, 151936), (33, 4096)])
def test_dispatched_softmax_matches_float64(m, n, dtype):
    from autotuner import softmax

    x = random_input(m, n, dtype)
    result = check_softmax(softmax(x), x, dtype)
    assert result.ok, result.message


def test_softmax_over_a_middle_dimension_of_a_strided_tensor():
    import torch

    from autotuner import softmax

    x = random_input(8, 6 * 300, "fp32").reshape(8, 6, 300).transpose(0, 2)
    assert torch.allclose(softmax(x, dim=1), torch.softmax(x.double(), dim=1).float(), atol=1e-6)


def test_softmax_inside_torch_compile():
    import torch

    from autotuner import softmax

    compiled = torch.compile(lambda t: softmax(t * 2.0) + 1.0, fullgraph=True)
    x = random_input(16, 32000, "bf16")
    expected = torch.softmax((x * 2.0).double(), -1) + 1.0
    assert torch.allclose(compiled(x).double(), expected, atol=2e-2)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_a_call_autograd_records_gives_torchs_gradient_eagerly_and_compiled(dtype):
    """x requiring grad with grad mode on: torch.softmax (no plan launches it), gradients torch's, in
    eager mode and through torch.compile(fullgraph=True); under no_grad the same x takes a kernel."""
    import torch

    from autotuner import runtime, softmax

    x = random_input(6, 3001, dtype).requires_grad_()
    weights = torch.randn(6, 3001, device="cuda", dtype=x.dtype)
    reference = x.detach().clone().requires_grad_()
    (torch.softmax(reference, -1) * weights).float().sum().backward()
    for run in (softmax, torch.compile(lambda t: softmax(t), fullgraph=True)):
        x.grad = None
        launched = runtime.plan_stats()["launches"]
        y = run(x)
        mode = "eager" if run is softmax else "compiled"
        assert y.grad_fn is not None, mode
        assert runtime.plan_stats()["launches"] == launched, mode  # no plan launched it
        (y * weights).float().sum().backward()
        error = (x.grad.float() - reference.grad.float()).abs().max().item()
        if run is softmax:  # torch.softmax's own backward, bit for bit
            assert torch.equal(x.grad, reference.grad), (mode, error)
        else:  # inductor's fused backward of the same formula
            assert torch.allclose(x.grad.float(), reference.grad.float(), rtol=2e-2, atol=1e-4), (mode, error)
    with torch.no_grad():
        result = check_softmax(softmax(x), x.detach(), dtype)
    assert result.ok, result.message


def test_float64_and_the_dtype_argument_match_torch():
    import torch

    from autotuner import softmax

    x = random_input(5, 1000, "fp32").double()
    assert torch.equal(softmax(x), torch.softmax(x, -1))
    half = random_input(7, 4096, "fp16")
    got = softmax(half, dtype=torch.float32)  # torch's one-pass fp16-in, fp32-out kernel
    assert got.dtype == torch.float32 and torch.equal(got, torch.softmax(half, -1, dtype=torch.float32))
    result = check_softmax(got, half.float(), "fp32")
    assert result.ok, result.message
    brain = random_input(7, 4096, "bf16")  # cast first, as torch does, then the fp32 pick
    got = softmax(brain, dtype=torch.float32)
    assert got.dtype == torch.float32
    result = check_softmax(got, brain.float(), "fp32")
    assert result.ok, result.message


def test_softmax_captured_in_a_cuda_graph_replays_on_new_input():
    import torch

    from autotuner import softmax

    x = random_input(32, 50257, "fp16")
    softmax(x)  # compile and allocate outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = softmax(x)
    x.copy_(random_input(32, 50257, "fp16"))
    graph.replay()
    torch.cuda.synchronize()
    result = check_softmax(y, x, "fp16")
    assert result.ok, result.message


def test_a_new_shape_first_met_inside_a_cuda_graph_capture_replays_correctly():
    import torch

    from autotuner import softmax

    x = random_input(3, 3001, "fp32")
    softmax(random_input(3, 3000, "fp32"))  # the instance compiled; 3 x 3001 itself never seen
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = softmax(x)
    x.copy_(random_input(3, 3001, "fp32"))
    graph.replay()
    torch.cuda.synchronize()
    result = check_softmax(y, x, "fp32")
    assert result.ok, result.message


@pytest.mark.parametrize("m, n, dtype", [(1, 1024, "bf16"), (4, 4096, "fp32"), (33, 4096, "fp16"), (1, 262144, "fp32"),
                                         (2, 1048576, "bf16")])
def test_kept_launches_are_correct_on_any_stream(m, n, dtype):
    """A repeated shape's kept native launch (new pointers and stream per call; cuda_grid_split's and
    cuda_long_split's bound to their stream's slots) gives correct answers call after call, on the
    default and a side stream."""
    import torch

    from autotuner import softmax

    x = random_input(m, n, dtype)
    outputs = [softmax(x) for _ in range(3)]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        outputs += [softmax(x) for _ in range(3)]
    torch.cuda.current_stream().wait_stream(stream)
    outputs += [softmax(x) for _ in range(2)]
    for y in outputs:
        result = check_softmax(y, x, dtype)
        assert result.ok, result.message


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
def test_every_new_shape_is_launched_correctly_from_its_instance(dtype):
    """200 shapes never seen before (M 1-64, N 1-9000, and a few decode-like ones growing by one):
    each takes its pick's instance and that instance's launch arithmetic, and is checked."""
    import random

    from autotuner import runtime, softmax

    rng = random.Random(29)
    shapes = [(rng.randint(1, 64), rng.randint(1, 9000)) for _ in range(180)] + [(256, 2048 + i) for i in range(20)]
    for m, n in shapes:
        x = random_input(m, n, dtype)
        result = check_softmax(softmax(x), x, dtype)
        assert result.ok, f"{m}x{n} {runtime.select_kernel(m, n, dtype).variant}: {result.message}"
    assert len(runtime._recent) <= runtime.RECENT_SHAPES


def test_misaligned_rows_are_torchs_in_the_plan_and_the_builds_own_launch_on_the_python_path():
    """Rows whose data pointer is not 16-byte aligned: the plan computes them with at::softmax, whatever
    the pick (a sampling step's logits[:, -1] of one sequence over GPT-2's odd vocabulary, 7 of 8
    lengths), and the Python path's build launch handles them too."""
    import torch

    from autotuner import runtime, softmax

    base = random_input(1, 4 * 4096 + 1, "fp32")
    x = base[0, 1:].view(4, 4096)
    assert x.data_ptr() % 16
    softmax(x.contiguous())  # the shape's native launch, taught from aligned rows
    misaligned = 0
    for length in range(1, 10):
        logits = random_input(length, 50257, "fp16").view(1, length, 50257)
        rows = logits[:, -1, :]
        stats = runtime.plan_stats()
        result = check_softmax(softmax(rows), rows, "fp16")
        assert result.ok, (length, result.message)
        after = runtime.plan_stats()
        if rows.data_ptr() % 16:  # (an aligned length's pick may not be taught in this process yet)
            misaligned += 1
            assert after["launches"] == stats["launches"] + 1 and after["declined"] == stats["declined"], length
    assert misaligned == 7
    assert torch.allclose(softmax(x), torch.softmax(x.double(), -1).float(), atol=1e-6)
    out = runtime._launch(x.get_device(), x, "fp32")  # the Python path: the native run refuses x, the build launches
    assert torch.allclose(out, torch.softmax(x.double(), -1).float(), atol=1e-6)


def test_an_attentions_4d_scores_and_strided_rows_are_launched_by_the_plan():
    """A model hands softmax its attention scores as (batch, heads, queries, keys): contiguous rows of
    keys, which the native dispatch launches through the plan as it does 2-D rows (the Python path would
    reshape them twice), with torch's probabilities; a 1-D row too, and rows that are not contiguous
    (copied first, as torch.softmax copies them). Without warm-up, a key length's
    class is taught by its first calls: a Triton bucket's first compiles it, the next teaches the plan."""
    import torch

    from autotuner import runtime, softmax

    for keys in (1000, 1001, 1002, 2048, 2049):
        for shape in ((2, 8, 1, keys), (1, 4, 3, keys), (keys,)):
            scores = random_input(math.prod(shape) // keys, keys, "fp16").view(shape)
            softmax(scores)  # compiles the pick's kernel where it is new
            softmax(scores)  # teaches the plan its class
            before = runtime.plan_stats()
            got = softmax(scores)
            after = runtime.plan_stats()
            assert got.shape == scores.shape and torch.allclose(got.double(), torch.softmax(scores.double(), -1),
                                                                 rtol=2e-2, atol=1e-5), shape
            assert after["launches"] == before["launches"] + 1 and after["declined"] == before["declined"], shape
    rows = random_input(15, 2048, "fp16").view(3, 5, 2048)[:, -1]  # several sequences' last positions
    assert not rows.is_contiguous()
    softmax(rows)  # as above: compiles and teaches where (3, 2048)'s pick is new
    softmax(rows)
    before = runtime.plan_stats()
    got = softmax(rows)  # copied to contiguous rows first, as torch.softmax copies them
    after = runtime.plan_stats()
    assert torch.allclose(got.double(), torch.softmax(rows.double(), -1), rtol=2e-2, atol=1e-5)
    assert after["launches"] == before["launches"] + 1 and after["declined"] == before["declined"]


def test_softmax_from_fresh_threads():
    """A new thread has no CUDA context of its own until something sets one; launches from it work."""
    import threading

    import torch

    from autotuner import softmax

    inputs = [random_input(1, 1024, "bf16"), random_input(4, 4096, "fp32")] * 3
    for x in inputs:
        softmax(x)
    outputs = [None] * len(inputs)

    def work(i):
        outputs[i] = softmax(inputs[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    for x, y in zip(inputs, outputs):
        dtype = "bf16" if x.dtype == torch.bfloat16 else "fp32"
        assert check_softmax(y, x, dtype).ok


def test_triton_launch_hooks_are_called_on_the_fast_path():
    import torch
    from triton import knobs

    from autotuner import select_kernel, softmax

    if not select_kernel(1, 1024, "bf16").variant.startswith("triton"):
        pytest.skip("the dispatch picks no Triton kernel for bf16 1x1024 here")
    x = random_input(1, 1024, "bf16")
    softmax(x)
    seen = []

    def hook(metadata):
        seen.append(metadata)

    chain = knobs.runtime.launch_enter_hook
    chain.add(hook)
    try:
        y = softmax(x)
    finally:
        chain.remove(hook)
    torch.cuda.synchronize()
    assert seen and check_softmax(y, x, "bf16").ok


def test_softmax_of_a_tensor_on_another_device():
    import torch

    from autotuner import softmax

    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU")
    x = random_input(4, 4096, "fp32", device="cuda:1")
    with torch.cuda.device(0):
        ys = [softmax(x), softmax(x)]
    for y in ys:
        assert y.device == x.device and check_softmax(y, x, "fp32").ok


# shapes whose picks span the backends and launch kinds: one row a program (Triton and CUDA), short
# rows, a cluster a row, a split row with its workspace; each dtype
TWO_DEVICE_SHAPES = [(4, 4096), (1, 151936), (3, 1 << 20), (16384, 128), (77, 5003), (257, 30522), (2, 1000)]


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_new_and_repeated_shapes_on_two_devices_from_either_current_device_and_threads(dtype):
    """Each device has its own plans, builds and workspaces: x on one device is computed there whatever
    device is current, a shape first met on one device is new on the other, and two threads, each
    working on its own device, do not mix them up."""
    import threading

    import torch

    from autotuner import runtime, softmax

    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU")
    native_before = runtime.native_module() is not None
    for step in range(2):  # new shapes, then the same shapes again (kept launches)
        for device, current in ((1, 0), (0, 1), (1, 1)):
            inputs = [random_input(m + step, n, dtype, device=f"cuda:{device}") for m, n in TWO_DEVICE_SHAPES]
            with torch.cuda.device(current):
                outputs = [softmax(x) for x in inputs]
            for x, y in zip(inputs, outputs):
                assert y.device == x.device, (x.shape, device, current)
                result = check_softmax(y, x, dtype)
                assert result.ok, (tuple(x.shape), device, current, result)
    failures: list[str] = []

    def work(device: int) -> None:
        torch.cuda.set_device(device)
        for i in range(40):
            m, n = TWO_DEVICE_SHAPES[i % len(TWO_DEVICE_SHAPES)]
            x = random_input(m + 3 + i // len(TWO_DEVICE_SHAPES), n, dtype, device=f"cuda:{device}")
            y = softmax(x)
            if y.device != x.device or not check_softmax(y, x, dtype).ok:
                failures.append(f"{tuple(x.shape)} on cuda:{device}")

    threads = [threading.Thread(target=work, args=(d,)) for d in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    # a launch the driver refused on the second device would have turned the native path off (and the
    # Python path would have raised the same error): the module is still on
    assert not native_before or runtime.native_module() is not None


def test_out_of_memory_raises_torchs_error_and_keeps_the_native_path():
    """An output that does not fit: the plan declines (it does not raise from C), the Python path raises
    torch.OutOfMemoryError as torch.softmax would, and the native module stays on for the next call."""
    import torch

    from autotuner import runtime, softmax

    x = random_input(8192, 8192, "fp32")  # 256 MB
    softmax(x[:3])  # the rows' plan made and its launch taught, on a small shape of the same class
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(x.device).total_memory
    torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_reserved() + x.numel() * 2) / total)
    try:
        with pytest.raises(torch.OutOfMemoryError):
            softmax(x)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    assert not runtime._native_failed  # the module (where it is built) was not turned off
    assert runtime.native_module() is None or runtime._dispatch is not None
    assert check_softmax(softmax(x), x, "fp32").ok


def test_a_small_decoder_model_through_softmax_gives_torchs_probabilities():
    """A two-layer decoder (causal attention whose scores go through softmax with dtype=float32, as
    Hugging Face models call it; an odd vocabulary of 50257 for sampling), decoding key lengths 29 to
    40 (a new shape each step), batch 3, fp16: softmax as torch.softmax gives the same next-token
    probabilities, under no_grad and inference_mode (the tuned kernels), with grad mode on and weights
    that require grad (torch's, differentiable), and compiled with fullgraph=True."""
    import math

    import torch

    from autotuner import softmax

    torch.manual_seed(0)
    vocab, width, heads, layers = 50257, 256, 4, 2
    param = lambda *shape: torch.nn.Parameter(torch.randn(*shape, device="cuda", dtype=torch.float16) / math.sqrt(shape[0]))  # noqa: E731
    embed, head = param(vocab, width), param(width, vocab)
    weights = [[param(width, width) for _ in range(6)] for _ in range(layers)]

    def model(tokens, soft):
        h = embed[tokens] * math.sqrt(width)
        batch, length, _ = h.shape
        mask = torch.full((length, length), float("-inf"), device="cuda").triu(1)
        for wq, wk, wv, wo, up, down in weights:
            split = lambda t: t.view(batch, length, heads, -1).transpose(1, 2)  # noqa: E731
            q, k, v = split(h @ wq), split(h @ wk), split(h @ wv)
            scores = q @ k.transpose(-1, -2) / math.sqrt(width // heads) + mask
            attended = soft(scores, dim=-1, dtype=torch.float32).to(h.dtype) @ v
            h = h + attended.transpose(1, 2).reshape(batch, length, width) @ wo
            h = h + torch.relu(h @ up) @ down
        return soft(h[:, -1] @ head, dim=-1)  # the next token's probabilities, (batch, vocab)

    tokens = torch.randint(0, vocab, (3, 40), device="cuda")
    compiled = torch.compile(lambda t: model(t, softmax), fullgraph=True, dynamic=True)
    for length in range(29, 41):
        prefix = tokens[:, :length]
        with torch.no_grad():
            expected = model(prefix, torch.softmax).double()
            got = model(prefix, softmax)
        with torch.inference_mode():
            inferred = model(prefix, softmax)
        differentiable = model(prefix, softmax)
        assert differentiable.grad_fn is not None
        with torch.no_grad():
            traced = compiled(prefix)
        for probabilities in (got, inferred, differentiable, traced):
            assert torch.allclose(probabilities.double(), expected, rtol=2e-2, atol=1e-5), length
            assert torch.allclose(probabilities.double().sum(-1), torch.ones(3, dtype=torch.float64, device="cuda"), atol=1e-2)


def test_after_warmup_the_plans_launch_every_new_shape_whose_pick_has_a_native_rule():
    """Warm-up teaches the native plans each instance's launch per class of N (``runtime_warmup._teach``),
    so a first call of a class takes no Python path: over 400 new fp16 shapes log-uniform over the
    domain (tensors up to 32 MB), the plan declines only picks without a native rule, and Triton's
    N = 1 (an int argument of 1 is a constant to Triton: declined by design)."""
    import random

    from autotuner import runtime, warmup
    from kernels.registry import native_rule

    report = warmup(dtypes=("fp16",))
    assert report["dtypes"]["fp16"]["plan_launches_taught"] > 0 and not report["dtypes"]["fp16"]["failed"], report
    rng = random.Random(29)
    shapes = set()
    while len(shapes) < 400:
        m, n = int(2 ** rng.uniform(0, 20)), int(2 ** rng.uniform(0, 24))
        if m * n <= 16 << 20 and (m, n) not in runtime._recent:
            shapes.add((m, n))
    unexpected = []
    for m, n in sorted(shapes, key=lambda shape: rng.random()):
        x = random_input(m, n, "fp16")
        declined = runtime.plan_stats()["declined"]
        y = runtime.softmax(x)
        if runtime.plan_stats()["declined"] > declined:
            build = runtime.instance_for(x.get_device(), m, n, "fp16")
            rule = native_rule(build)
            if rule is not None and not (rule.by_class and n == 1):
                unexpected.append((m, n, build.variant, build.config.params))
        if m * n <= 1 << 20:
            result = check_softmax(y, x, "fp16")
            assert result.ok, (m, n, result.message)
    assert not unexpected, f"declined after warm-up though their pick has a native rule: {unexpected[:10]}"
