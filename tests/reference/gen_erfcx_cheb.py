#!/usr/bin/env python3
"""Chebyshev coefficients of the scaled complementary error function
erfcx(u) = exp(u^2) erfc(u) on u in [0, 20], for src/nn/gelu.c.

The variable is w = (u - K) / (u + K) (K = 3.75, after Schonfelder, "Chebyshev
expansions for the error and related functions", Math. Comp. 32, 1978),
mapped linearly from [-1, w(20)] onto y in [-1, 1]; the coefficients are the
discrete Chebyshev transform at N + 8 Chebyshev nodes in 40-digit arithmetic
(mpmath), N = 24 terms, printed as C hex doubles. Also prints the largest
relative error of the truncated series against mpmath on 4000 points.
Run: /usr/bin/python3 tests/reference/gen_erfcx_cheb.py
"""
import mpmath as mp

mp.mp.dps = 40
K, U, N = mp.mpf("3.75"), mp.mpf(20), 24
WMAX = (U - K) / (U + K)
A = 2 / (WMAX + 1)  # y = A * w + (A - 1)


def u_of_y(y):
    w = (y + 1) / A - 1
    return K * (1 + w) / (1 - w)


def f(y):
    u = u_of_y(y)
    return mp.exp(u * u) * mp.erfc(u)


M = N + 8
nodes = [mp.cos(mp.pi * (k + mp.mpf(0.5)) / M) for k in range(M)]
vals = [f(y) for y in nodes]
c = [2 * mp.fsum(vals[k] * mp.cos(mp.pi * j * (k + mp.mpf(0.5)) / M) for k in range(M)) / M
     for j in range(N)]


def series(y):
    b1 = b2 = mp.mpf(0)
    for j in range(N - 1, 0, -1):
        b1, b2 = 2 * y * b1 - b2 + c[j], b1
    return y * b1 - b2 + c[0] / 2


err = max(abs(series(y) / f(y) - 1) for y in [-1 + 2 * mp.mpf(i) / 3999 for i in range(4000)])
print("/* K = %s, A = %s, max relative error of the series %s */" %
      (mp.nstr(K, 4), float(A).hex(), mp.nstr(err, 3)))
print("static const double k_erfcx_cheb[%d] = {" % N)
print("    " + ",\n    ".join(float(x).hex() for x in [c[0] / 2] + c[1:]) + "};")
