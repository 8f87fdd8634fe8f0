"""SamplingParams validation and the logits -> probs transform (verispec.sampling).

Every filter is checked against a small hand-computed example, and the documented filter
order (temperature -> top-k -> top-p -> min-p) against cases where a different order gives a
different answer.
"""

from __future__ import annotations

import math

import pytest
import torch

from verispec.sampling import MIN_TEMPERATURE, SamplingParams, logits_to_probs


def _logits(probs, dtype=torch.float64):
    """Logits whose softmax is ``probs`` (zeros become -inf)."""
    return torch.tensor(probs, dtype=dtype).log()


def _close(a: torch.Tensor, b, atol=1e-12):
    torch.testing.assert_close(a, torch.as_tensor(b, dtype=a.dtype), rtol=0, atol=atol)


# ----------------------------------------------------------------------------------------------
# SamplingParams validation, one field at a time


@pytest.mark.parametrize(
    "kwargs, exc, field",
    [
        (dict(temperature=-0.1), ValueError, "temperature"),
        (dict(temperature=float("nan")), ValueError, "temperature"),
        (dict(temperature=float("inf")), ValueError, "temperature"),
        (dict(temperature="1"), TypeError, "temperature"),
        (dict(temperature=1e-40), ValueError, "temperature"),  # logits / T overflows float32
        (dict(temperature=9.9e-5), ValueError, "temperature"),
        (dict(top_p=0.0), ValueError, "top_p"),
        (dict(top_p=-0.5), ValueError, "top_p"),
        (dict(top_p=1.0000001), ValueError, "top_p"),
        (dict(top_p=float("nan")), ValueError, "top_p"),
        (dict(min_p=-0.01), ValueError, "min_p"),
        (dict(min_p=1.0), ValueError, "min_p"),
        (dict(min_p=1.5), ValueError, "min_p"),
        (dict(top_k=-1), ValueError, "top_k"),
        (dict(top_k=2.0), TypeError, "top_k"),
        (dict(top_k=True), TypeError, "top_k"),
        (dict(seed=1.5), TypeError, "seed"),
        (dict(seed=True), TypeError, "seed"),
        (dict(seed=2**63), ValueError, "seed"),
    ],
)
def test_sampling_params_rejects_bad_field(kwargs, exc, field):
    with pytest.raises(exc, match=field):
        SamplingParams(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(),
        dict(temperature=0),
        dict(temperature=1e-4),  # MIN_TEMPERATURE
        dict(temperature=0.7, top_k=5, top_p=0.9, min_p=0.05, seed=-(2**63)),
        dict(top_p=1.0, min_p=0.0, top_k=0, seed=2**63 - 1),
        dict(top_p=1e-9, min_p=0.999),
    ],
)
def test_sampling_params_accepts_boundary_values(kwargs):
    params = SamplingParams(**kwargs)
    assert params.greedy == (params.temperature == 0)


# ----------------------------------------------------------------------------------------------
# logits_to_probs input errors


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_logits_nan_or_posinf_raise(bad):
    logits = torch.tensor([[0.0, 1.0, bad]])
    with pytest.raises(ValueError, match="NaN"):
        logits_to_probs(logits, SamplingParams())
    with pytest.raises(ValueError, match="NaN"):
        logits_to_probs(logits, SamplingParams(temperature=0))


def test_min_temperature_keeps_large_logits_finite_in_float32():
    """At the floor, logits far beyond any model's (1e30) still give finite probabilities."""
    logits = torch.tensor([[1e30, 0.0, -1e30], [0.0, 1e-3, 2e-3]], dtype=torch.float32)
    probs = logits_to_probs(logits, SamplingParams(temperature=MIN_TEMPERATURE))
    assert bool(torch.isfinite(probs).all())
    _close(probs.sum(-1), [1.0, 1.0], atol=1e-6)


@pytest.mark.parametrize("temperature, value", [(1e-40, 1.0), (1e-4, 3e35), (0.5, -3.0e38)])
def test_overflowing_logits_over_temperature_raise_instead_of_nan(temperature, value):
    """logits / T that overflow float32 would make p NaN (and NaN a token): refused. Temperatures
    below the floor are forced past SamplingParams' own check to reach the transform."""
    params = SamplingParams(temperature=0.5)
    object.__setattr__(params, "temperature", temperature)  # frozen dataclass: bypass validation
    logits = torch.tensor([[value, 0.0, 0.5], [0.0, 0.1, 0.2]], dtype=torch.float32)
    if value < 0:  # every logit of row 0 overflows to -inf
        logits[0] = value
    with pytest.raises(ValueError, match="overflow"):
        logits_to_probs(logits, params)


def test_logits_all_neginf_row_raises():
    logits = torch.tensor([[0.0, 1.0], [-math.inf, -math.inf]])
    with pytest.raises(ValueError, match="-inf"):
        logits_to_probs(logits, SamplingParams())


def test_logits_must_be_float_tensor():
    with pytest.raises(TypeError, match="logits"):
        logits_to_probs(torch.tensor([[1, 2, 3]]), SamplingParams())
    with pytest.raises(TypeError, match="logits"):
        logits_to_probs([[0.1, 0.2]], SamplingParams())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="logits"):
        logits_to_probs(torch.zeros(2, 0), SamplingParams())


# ----------------------------------------------------------------------------------------------
# Temperature


def test_temperature_zero_is_one_hot_argmax_ties_to_lowest_id():
    logits = torch.tensor(
        [
            [1.0, 3.0, 3.0, 2.0],  # tie between 1 and 2 -> 1
            [5.0, 5.0, 5.0, 5.0],  # all tied -> 0
            [-math.inf, -1.0, -math.inf, -1.0],  # -inf allowed; tie -> 1
            [0.0, 0.0, 0.0, 7.0],
        ]
    )
    probs = logits_to_probs(logits, SamplingParams(temperature=0, top_k=2, top_p=0.1, min_p=0.5))
    _close(probs, [[0, 1, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1]], atol=0)
    assert probs.dtype == logits.dtype


def test_temperature_scales_logits():
    logits = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)
    for t in (0.5, 1.0, 3.0):
        want = torch.exp(logits / t) / torch.exp(logits / t).sum()
        _close(logits_to_probs(logits, SamplingParams(temperature=t)), want, atol=1e-15)


# ----------------------------------------------------------------------------------------------
# top-k, top-p, min-p against hand-computed examples


def test_top_k_hand_computed():
    logits = _logits([0.1, 0.2, 0.3, 0.4])
    _close(logits_to_probs(logits, SamplingParams(top_k=2)), [0, 0, 3 / 7, 4 / 7])
    _close(logits_to_probs(logits, SamplingParams(top_k=1)), [0, 0, 0, 1])
    # top_k >= V is a no-op
    _close(logits_to_probs(logits, SamplingParams(top_k=4)), [0.1, 0.2, 0.3, 0.4])
    _close(logits_to_probs(logits, SamplingParams(top_k=10)), [0.1, 0.2, 0.3, 0.4])


def test_top_k_keeps_all_ties_at_the_kth_value():
    logits = _logits([0.4, 0.2, 0.2, 0.2])
    # the 2nd largest value 0.2 is shared by three tokens: all of them are kept
    _close(logits_to_probs(logits, SamplingParams(top_k=2)), [0.4, 0.2, 0.2, 0.2])


def test_top_p_hand_computed():
    logits = _logits([0.15, 0.5, 0.05, 0.3])
    # sorted 0.5, 0.3, 0.15, 0.05; mass before each: 0, 0.5, 0.8, 0.95
    _close(logits_to_probs(logits, SamplingParams(top_p=0.7)), [0, 0.5 / 0.8, 0, 0.3 / 0.8])
    _close(logits_to_probs(logits, SamplingParams(top_p=0.85)), [0.15 / 0.95, 0.5 / 0.95, 0, 0.3 / 0.95])
    _close(logits_to_probs(logits, SamplingParams(top_p=0.97)), [0.15, 0.5, 0.05, 0.3])
    # the most likely token always stays
    _close(logits_to_probs(logits, SamplingParams(top_p=1e-6)), [0, 1, 0, 0])


def test_min_p_hand_computed():
    logits = _logits([0.05, 0.3, 0.5, 0.15])
    # cutoff 0.2 * 0.5 = 0.1 drops 0.05
    _close(logits_to_probs(logits, SamplingParams(min_p=0.2)), [0, 0.3 / 0.95, 0.5 / 0.95, 0.15 / 0.95])
    # cutoff 0.5 * 0.5 = 0.25 drops 0.05 and 0.15
    _close(logits_to_probs(logits, SamplingParams(min_p=0.5)), [0, 0.3 / 0.8, 0.5 / 0.8, 0])
    # the largest token is never dropped
    _close(logits_to_probs(logits, SamplingParams(min_p=0.99)), [0, 0, 1, 0])


# ----------------------------------------------------------------------------------------------
# The documented filter order: temperature -> top-k -> top-p -> min-p


def _softmax(w):
    w = torch.tensor(w, dtype=torch.float64)
    return w / w.sum()


def test_order_temperature_before_top_p():
    probs = [0.5, 0.3, 0.2]
    params = SamplingParams(temperature=2.0, top_p=0.45)
    got = logits_to_probs(_logits(probs), params)
    # temperature first: p^(1/2) normalised = [.4155, .3218, .2628]; mass before token 1 is
    # .4155 < .45, so tokens 0 and 1 stay.
    tempered = _softmax([x**0.5 for x in probs])
    _close(got, torch.tensor([tempered[0], tempered[1], 0]) / (tempered[0] + tempered[1]))
    # top-p first would keep token 0 alone (mass before token 1 is 0.5 >= 0.45).
    assert got[1] > 0.4


def test_order_temperature_before_min_p():
    probs = [0.6, 0.3, 0.1]
    got = logits_to_probs(_logits(probs), SamplingParams(temperature=3.0, min_p=0.4))
    # after temperature 3 the ratios to the max are (1/2)^(1/3) = .79 and (1/6)^(1/3) = .55,
    # both above 0.4: nothing is dropped. min-p on the raw probs would drop 0.1 (< 0.24).
    tempered = _softmax([x ** (1 / 3) for x in probs])
    _close(got, tempered)
    assert got[2] > 0


def test_order_top_k_before_top_p():
    probs = [0.4, 0.3, 0.2, 0.1]
    got = logits_to_probs(_logits(probs), SamplingParams(top_k=2, top_p=0.5))
    # top-k first: [4/7, 3/7]; mass before token 1 is 4/7 >= 0.5, so only token 0 stays.
    # top-p first would keep {0, 1} (mass before token 1 is 0.4 < 0.5) and top-k keeps both.
    _close(got, [1, 0, 0, 0])


def test_order_top_p_before_min_p():
    probs = [0.4, 0.3, 0.2, 0.1]
    got = logits_to_probs(_logits(probs), SamplingParams(top_p=0.75, min_p=0.3))
    # top-p first on the raw probs: mass before = 0, .4, .7, .9 -> keep {0, 1, 2};
    # min-p then drops nothing more (0.2 >= 0.3 * 0.4). Result [.4, .3, .2] / .9.
    # min-p first would drop 0.1, renormalise to [.444, .333, .222], and top-p 0.75 would
    # then drop token 2 (mass before it .778 >= .75).
    _close(got, [0.4 / 0.9, 0.3 / 0.9, 0.2 / 0.9, 0])


def test_all_filters_together_hand_computed():
    probs = [0.02, 0.08, 0.1, 0.15, 0.25, 0.4]
    got = logits_to_probs(_logits(probs), SamplingParams(top_k=4, top_p=0.8, min_p=0.5))
    # top-k 4 -> [.1, .15, .25, .4] / .9 = [.111, .167, .278, .444]
    # top-p .8: mass before = 0, .444, .722, .889 -> keep .444, .278, .167
    # -> renormalised [.5, .3125, .1875]; min-p .5 drops .1875 (< .25)
    _close(got, [0, 0, 0, 0, 0.25 / 0.65, 0.4 / 0.65])


# ----------------------------------------------------------------------------------------------
# General properties


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(),
        SamplingParams(temperature=0.3),
        SamplingParams(temperature=1.7, top_k=7),
        SamplingParams(top_p=0.6),
        SamplingParams(min_p=0.1),
        SamplingParams(temperature=0.8, top_k=20, top_p=0.9, min_p=0.05),
        SamplingParams(temperature=0),
    ],
)
def test_rows_sum_to_one_and_keep_shape_dtype(params, dtype):
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 5, 50, generator=gen) * 4).to(dtype)
    logits[0, 0, :10] = -math.inf
    probs = logits_to_probs(logits, params)
    assert probs.shape == logits.shape and probs.dtype == dtype
    assert bool((probs >= 0).all())
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(probs.sum(-1).double(), torch.ones(3, 5, dtype=torch.float64), rtol=0, atol=tol)
    assert bool((probs[0, 0, :10] == 0).all())  # masked tokens stay masked


def test_neginf_logits_are_masked_tokens():
    logits = torch.tensor([-math.inf, 0.0, -math.inf, math.log(3.0)], dtype=torch.float64)
    _close(logits_to_probs(logits, SamplingParams()), [0, 0.25, 0, 0.75])
    _close(logits_to_probs(logits, SamplingParams(top_p=0.5)), [0, 0, 0, 1])
    _close(logits_to_probs(logits, SamplingParams(top_k=3)), [0, 0.25, 0, 0.75])


def test_filters_are_elementwise_per_row():
    """A batch gives the same rows as each row on its own."""
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(6, 40, generator=gen, dtype=torch.float64) * 3
    params = SamplingParams(temperature=0.9, top_k=12, top_p=0.8, min_p=0.02)
    batch = logits_to_probs(logits, params)
    for i in range(6):
        assert torch.equal(batch[i], logits_to_probs(logits[i], params))


def test_row_params_give_each_row_exactly_its_own_transform():
    """One call over rows with different transforms (greedy among them) equals each row's own
    call, bit for bit: a row's p never depends on its neighbours."""
    from verispec.sampling import RowParams

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 3, 50, generator=g, dtype=torch.float32) * 3
    params = [SamplingParams(temperature=0), SamplingParams(temperature=0.7, top_p=0.9),
              SamplingParams(temperature=1.3, top_k=5), SamplingParams(temperature=1.0, min_p=0.1),
              SamplingParams(temperature=0.5, top_k=10, top_p=0.8, min_p=0.02)]
    together = logits_to_probs(logits, RowParams.of(params))
    for b, sp in enumerate(params):
        assert torch.equal(together[b], logits_to_probs(logits[b], sp))
    assert not torch.equal(together[1], logits_to_probs(logits[1], params[2]))  # the rows do differ
    with pytest.raises(ValueError, match="RowParams has 2 rows"):
        logits_to_probs(logits, RowParams.of(params[:2]))
