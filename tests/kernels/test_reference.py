"""The correctness oracle on the CPU: check_softmax in row blocks catches a wrong element or an
unwritten one in any block, and says which rows."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernels import reference  # noqa: E402


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(reference, "CHECK_BLOCK_ELEMENTS", 1000)  # 3 rows of 300 a block


def test_a_correct_output_passes_over_many_blocks(small_blocks):
    x = reference.random_input(50, 300, "fp32", device="cpu")
    result = reference.check_softmax(torch.softmax(x, -1), x, "fp32")
    assert result.ok and result.max_rel_error < 1e-5


@pytest.mark.parametrize("row", [0, 37, 49])
def test_a_wrong_or_unwritten_element_in_any_block_fails_naming_its_block(small_blocks, row):
    x = reference.random_input(50, 300, "bf16", device="cpu")
    for bad in (0.5, float("nan")):
        out = torch.softmax(x.float(), -1).to(torch.bfloat16)
        out[row, 7] = bad
        result = reference.check_softmax(out, x, "bf16")
        assert not result.ok
        assert f"(rows from {row // 3 * 3})" in result.message


def test_one_row_and_one_dimension():
    x = reference.random_input(1, 5, "fp16", device="cpu")[0]
    assert reference.check_softmax(torch.softmax(x.float(), -1).half(), x, "fp16").ok
