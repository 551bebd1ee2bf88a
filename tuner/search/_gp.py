"""A small Gaussian process for the default strategy: Matérn 5/2 with one length scale per
feature (ARD), on features scaled to [0, 1], fitted to standardized log times.

Why a GP next to the forest: with ten to thirty evaluations a forest of shallow trees predicts
a few flat steps, while a GP with per-field length scales interpolates between tilings that
differ in one tile size, which is where the early evaluations of a tiling search go (see the
strategy notes in ``_surrogate``). The hyperparameters (length scales, signal and noise
variance) are the maximum a posteriori values under weak log-normal priors (length scales
around half the unit range; little noise), found with L-BFGS and the exact gradient; the
priors keep a fit to ten points from collapsing onto one field.

Pure numpy/scipy: a few hundred observations and tens of thousands of candidates at most.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np
from scipy.linalg import cho_factor, cho_solve, solve_triangular
from scipy.optimize import minimize

_SQRT5 = math.sqrt(5.0)
#: Prior on log length scales: centred on half the unit range, wide (1.5 in log).
_LOG_LS_PRIOR, _LOG_LS_SD = math.log(0.5), 1.5
#: Prior on the log noise variance (of standardized log times): small but not zero.
_LOG_NOISE_PRIOR, _LOG_NOISE_SD = math.log(1e-2), 2.0
_JITTER = 1e-8


def _matern52(r: np.ndarray) -> np.ndarray:
    out: np.ndarray = (1.0 + _SQRT5 * r + (5.0 / 3.0) * r * r) * np.exp(-_SQRT5 * r)
    return out


def _scaled_sqdist(a: np.ndarray, b: np.ndarray, scales: np.ndarray) -> np.ndarray:
    a, b = a / scales, b / scales
    d = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
    out: np.ndarray = np.maximum(d, 0.0)
    return out


class GaussianProcess:
    """A GP fitted to ``(x, y)``; ``theta`` (log length scales, log signal and log noise
    variance) reuses earlier hyperparameters instead of fitting them again."""

    def __init__(
        self,
        x: np.ndarray,
        y: np.ndarray,
        *,
        theta: np.ndarray | None = None,
        rng: np.random.Generator | None = None,
        restarts: int = 1,
    ) -> None:
        if x.ndim != 2 or len(x) != len(y) or len(y) == 0:
            raise ValueError(f"GaussianProcess: x {x.shape} and y {y.shape} do not match")
        self.x = x
        self._mu = float(y.mean())
        self._sd = float(y.std()) or 1.0
        ys = (y - self._mu) / self._sd
        d = x.shape[1]
        if theta is None:
            theta = self._fit(x, ys, rng or np.random.default_rng(0), restarts)
        self.theta = theta
        self._scales = np.exp(theta[:d])
        self._signal = math.exp(theta[d])
        noise = math.exp(theta[d + 1])
        k = self._signal * _matern52(np.sqrt(_scaled_sqdist(x, x, self._scales)))
        k[np.diag_indices_from(k)] += noise + _JITTER
        self._chol = np.linalg.cholesky(k)
        self._alpha = cho_solve((self._chol, True), ys)

    def predict(self, xc: np.ndarray, *, chunk: int = 2048) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation at ``xc``, in the units of ``y``."""
        mean, var = np.empty(len(xc)), np.empty(len(xc))
        for s in range(0, len(xc), chunk):
            ks = self._signal * _matern52(
                np.sqrt(_scaled_sqdist(xc[s : s + chunk], self.x, self._scales))
            )
            mean[s : s + chunk] = ks @ self._alpha
            v = solve_triangular(self._chol, ks.T, lower=True)
            var[s : s + chunk] = self._signal - (v * v).sum(0)
        return mean * self._sd + self._mu, np.sqrt(np.maximum(var, 1e-12)) * self._sd

    @staticmethod
    def _fit(x: np.ndarray, ys: np.ndarray, rng: np.random.Generator, restarts: int) -> np.ndarray:
        d = x.shape[1]
        sq = (x[:, None, :] - x[None, :, :]) ** 2  # n x n x d, per-feature squared distances
        bounds = [(math.log(0.02), math.log(20.0))] * d + [
            (math.log(0.05), math.log(20.0)),  # signal variance
            (math.log(1e-6), math.log(1.0)),  # noise variance
        ]
        starts = [np.array([_LOG_LS_PRIOR] * d + [0.0, _LOG_NOISE_PRIOR])]
        starts += [np.array([rng.uniform(lo, hi) for lo, hi in bounds]) for _ in range(restarts)]
        best = None
        for start in starts:
            result = minimize(
                neg_log_posterior,
                start,
                args=(sq, ys),
                jac=True,
                method="L-BFGS-B",
                bounds=bounds,
                options={"maxiter": 100},
            )
            if best is None or result.fun < best.fun:
                best = result
        assert best is not None
        return np.asarray(best.x, dtype=float)


def neg_log_posterior(
    theta: np.ndarray, sq: np.ndarray, ys: np.ndarray
) -> tuple[float, np.ndarray]:
    """The negative log posterior of ``theta`` (up to a constant) and its gradient.

    ``theta`` holds d log length scales, the log signal variance and the log noise variance;
    ``sq`` the per-feature squared distances of the n observations (n x n x d); ``ys`` their
    standardized values.
    """
    n, _, d = sq.shape
    s = sq / np.exp(2.0 * theta[:d])
    r = np.sqrt(s.sum(-1))
    e = np.exp(-_SQRT5 * r)
    signal, noise = math.exp(theta[d]), math.exp(theta[d + 1])
    m = (1.0 + _SQRT5 * r + (5.0 / 3.0) * r * r) * e
    eye = np.eye(n)
    k = signal * m + (noise + _JITTER) * eye
    try:
        factor = cho_factor(k, lower=True)
    except np.linalg.LinAlgError:
        return 1e10, np.zeros_like(theta)
    alpha = cho_solve(factor, ys)
    value = 0.5 * ys @ alpha + np.log(np.diag(factor[0])).sum()
    w = np.outer(alpha, alpha) - cho_solve(factor, eye)
    grad = np.empty_like(theta)
    # dK/dlog(l_k) = signal * 5/3 (1 + sqrt5 r) exp(-sqrt5 r) * s_k
    dk = signal * (5.0 / 3.0) * (1.0 + _SQRT5 * r) * e
    grad[:d] = -0.5 * np.einsum("ij,ijk->k", w * dk, s)
    grad[d] = -0.5 * (w * (signal * m)).sum()
    grad[d + 1] = -0.5 * np.trace(w) * noise
    ls_dev = theta[:d] - _LOG_LS_PRIOR
    noise_dev = theta[d + 1] - _LOG_NOISE_PRIOR
    value += 0.5 * (ls_dev**2).sum() / _LOG_LS_SD**2 + 0.5 * noise_dev**2 / _LOG_NOISE_SD**2
    grad[:d] += ls_dev / _LOG_LS_SD**2
    grad[d + 1] += noise_dev / _LOG_NOISE_SD**2
    return float(value), grad


class PooledPosterior:
    """A GP's posterior over a fixed list of candidates, conditioned one observation at a time.

    With the hyperparameters ``theta`` fixed, adding k observations to n extends the Cholesky
    factor L of the kernel matrix by k rows and V = L^-1 K(X, candidates) by k rows: O(k n m)
    for m candidates, where conditioning from scratch costs O(n^2 m). The posterior is the
    same as :class:`GaussianProcess`'s with that ``theta`` (up to rounding): mean
    V^T L^-1 y, variance signal - the column sums of V^2.
    """

    def __init__(self, theta: np.ndarray, candidates: np.ndarray) -> None:
        d = candidates.shape[1]
        self.theta = theta
        self._scales = np.exp(theta[:d])
        self._signal = math.exp(theta[d])
        self._noise = math.exp(theta[d + 1])
        self._xc = candidates
        self.x = np.empty((0, d))
        self._chol = np.empty((0, 0))
        self._v = np.empty((16, len(candidates)))  # rows beyond len(self.x): room to grow
        self._vsq = np.zeros(len(candidates))

    def _k(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out: np.ndarray = self._signal * _matern52(np.sqrt(_scaled_sqdist(a, b, self._scales)))
        return out

    def add(self, x_new: np.ndarray, *, chunk: int = 4096) -> None:
        """Condition on the observations at ``x_new`` (k x d) as well."""
        if len(x_new) == 0:
            return
        n, k = len(self.x), len(x_new)
        c = self._k(x_new, x_new)
        c[np.diag_indices_from(c)] += self._noise + _JITTER
        s = solve_triangular(self._chol, self._k(self.x, x_new), lower=True) if n else None
        if s is not None:
            c -= s.T @ s
        t = np.linalg.cholesky(c)
        chol = np.zeros((n + k, n + k))
        chol[:n, :n] = self._chol
        if s is not None:
            chol[n:, :n] = s.T
        chol[n:, n:] = t
        if n + k > len(self._v):  # doubling: copying V at every step would cost O(n m)
            grown = np.empty((max(2 * len(self._v), n + k), self._v.shape[1]))
            grown[:n] = self._v[:n]
            self._v = grown
        rows = self._v[n : n + k]
        for a in range(0, len(self._xc), chunk):
            kc = self._k(x_new, self._xc[a : a + chunk])
            if s is not None:
                kc -= s.T @ self._v[:n, a : a + chunk]
            rows[:, a : a + chunk] = solve_triangular(t, kc, lower=True)
        self._chol = chol
        self._vsq += (rows * rows).sum(0)
        self.x = np.vstack([self.x, x_new])

    def predict(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation at every candidate, given the values ``y`` of
        the observations added so far (standardized here, as :class:`GaussianProcess` does)."""
        if len(y) != len(self.x) or len(y) == 0:
            raise ValueError(f"PooledPosterior: {len(y)} values for {len(self.x)} observations")
        mu, sd = float(y.mean()), float(y.std()) or 1.0
        w = solve_triangular(self._chol, (y - mu) / sd, lower=True)
        mean = self._v[: len(w)].T @ w
        var = np.maximum(self._signal - self._vsq, 1e-12)
        return mean * sd + mu, np.sqrt(var) * sd


def extension_order(known: Sequence[Hashable], configs: Sequence[Hashable]) -> list[int] | None:
    """Positions in ``configs`` in the order of a posterior conditioned on ``known`` and then
    extended to all of them: ``known``'s (in its order), then the rest (in theirs); None when
    ``configs`` does not hold every one of ``known``, as many times."""
    where: dict[Hashable, list[int]] = {}
    for i, config in enumerate(configs):
        where.setdefault(config, []).append(i)
    order = []
    for config in known:
        positions = where.get(config)
        if not positions:
            return None
        order.append(positions.pop(0))
    taken = set(order)
    return order + [i for i in range(len(configs)) if i not in taken]
