"""Case lists and readable pytest ids shared by the test modules (pytest puts tests/ on sys.path)."""

import torch


def dtype_id(dtype):
    return {torch.int8: "i8", torch.uint8: "u8"}[dtype]


def dtype_pair_id(pair):
    return "x".join(dtype_id(d) for d in pair)


def alpha_beta_id(pair):
    alpha, beta = pair
    return f"alpha{alpha}-beta{beta}"


# alpha/beta pairs whose products with the accumulator or C overflow int32 and must wrap.
ALPHA_BETA_WRAP = [
    (2**30, 0),
    (-(2**31), 1),
    (2**31 - 1, -(2**31)),
    (65537, 65537),
]
