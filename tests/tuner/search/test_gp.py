"""The default strategy's Gaussian process: its gradient, what it learns, what it predicts."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import check_grad

from tilewise.search._gp import GaussianProcess, neg_log_posterior


def test_the_gradient_of_the_objective_matches_finite_differences() -> None:
    rng = np.random.default_rng(1)
    x = rng.random((25, 3))
    ys = np.sin(4 * x[:, 0]) + 0.3 * x[:, 1] + 0.05 * rng.standard_normal(25)
    ys = (ys - ys.mean()) / ys.std()
    sq = (x[:, None, :] - x[None, :, :]) ** 2
    for theta in (np.array([-0.7, 0.1, 1.2, 0.2, -4.0]), np.array([-2.0, -1.0, 0.5, -0.5, -9.0])):
        error = check_grad(
            lambda t: neg_log_posterior(t, sq, ys)[0],
            lambda t: neg_log_posterior(t, sq, ys)[1],
            theta,
        )
        scale = np.linalg.norm(neg_log_posterior(theta, sq, ys)[1])
        assert error < 1e-4 * max(1.0, scale), (theta, error, scale)


def test_it_learns_which_feature_matters() -> None:
    rng = np.random.default_rng(0)
    x = rng.random((30, 2))
    y = np.sin(6 * x[:, 0])  # the second feature is noise-free irrelevance
    gp = GaussianProcess(x, y, rng=rng)
    scales = np.exp(gp.theta[:2])
    assert scales[1] > 4 * scales[0], scales


def test_it_interpolates_and_is_unsure_far_from_the_data() -> None:
    x = np.linspace(0, 0.5, 8)[:, None]
    y = np.log(1 + 10 * x[:, 0])
    gp = GaussianProcess(x, y, rng=np.random.default_rng(0))
    mean, std = gp.predict(np.array([[0.25], [0.95]]))
    assert mean[0] == pytest.approx(np.log(1 + 2.5), abs=0.05)
    assert std[1] > 5 * std[0]
    at_data, _ = gp.predict(x)
    assert np.allclose(at_data, y, atol=0.02)


def test_reused_hyperparameters_give_the_same_prediction() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.random((12, 2)), rng.random(12)
    fitted = GaussianProcess(x, y, rng=rng)
    again = GaussianProcess(x, y, theta=fitted.theta)
    probe = rng.random((5, 2))
    assert np.allclose(fitted.predict(probe)[0], again.predict(probe)[0])


def test_mismatched_data_is_refused() -> None:
    with pytest.raises(ValueError, match="do not match"):
        GaussianProcess(np.zeros((3, 2)), np.zeros(4))


def test_the_pooled_posterior_extended_step_by_step_is_the_gp_conditioned_afresh() -> None:
    """Adding observations one or a few at a time gives the posterior of a GP conditioned on
    all of them at once with the same hyperparameters."""
    from tilewise.search._gp import PooledPosterior

    rng = np.random.default_rng(3)
    x = rng.random((40, 3))
    y = np.sin(5 * x[:, 0]) + x[:, 1] ** 2
    pool = rng.random((300, 3))
    theta = GaussianProcess(x[:20], y[:20], rng=rng).theta
    posterior = PooledPosterior(theta, pool)
    for a, b in ((0, 20), (20, 21), (21, 25), (25, 40)):
        posterior.add(x[a:b])
        mean, std = posterior.predict(y[:b])
        want_mean, want_std = GaussianProcess(x[:b], y[:b], theta=theta).predict(pool)
        np.testing.assert_allclose(mean, want_mean, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(std, want_std, rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="39 values for 40 observations"):
        posterior.predict(y[:39])
