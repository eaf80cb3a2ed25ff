"""Private binary trees over a cell domain (papers/002 section 2.4) and the pieces MTSP-LDP
builds from them: estimation from OUE reports, dissimilarity, adaptive partitions, range covers.

The domain [0, d) is padded to D = 2**h >= d leaves (h >= 1). A tree is a flat array of
2D - 1 node values in heap order: level 0 is the root, level l holds nodes 2**l - 1 ...
2**(l+1) - 2, node i of level l covers leaves [i 2**(h-l), (i+1) 2**(h-l)), and node x has
children 2x + 1 and 2x + 2. A node is *real* if it covers at least one cell of [0, d); the
others lie in the padding, hold no user and are known to be 0, so nobody reports them.

Node values are frequencies: the fraction of the users holding a value whose value lies in the
node's interval (the root is 1 by definition). Reports are simulated on aggregates, as in
:mod:`mechanisms.baselines.ldp_ids`: a level's group of reporters is a uniformly random subset of
the users holding a value, drawn from the cell counts as a multivariate hypergeometric sample.

The functions here work on one tree. MTSP-LDP's runs, alone or many at once, take the same
steps over a batch of trees (:mod:`mechanisms.baselines.mtsp_batch`); the tests check the batch
against these functions applied tree by tree, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mechanisms.baselines.ldp import oue_frequencies, oue_variance


def height(d: int) -> int:
    """The smallest h >= 1 with 2**h >= d."""
    return max(1, (int(d) - 1).bit_length())


def level_slice(level: int) -> slice:
    """The heap positions of the nodes of ``level``."""
    return slice(2**level - 1, 2 ** (level + 1) - 1)


def node_bounds(nodes: np.ndarray, h: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(level, first leaf, last leaf) of each heap position in ``nodes``."""
    nodes = np.asarray(nodes, dtype=np.int64)
    level = np.frexp(nodes + 1)[1].astype(np.int64) - 1  # exact floor(log2(nodes + 1))
    width = np.left_shift(1, h - level)
    first = (nodes - (2**level - 1)) * width
    return level, first, first + width - 1


def real_nodes(h: int, d: int) -> np.ndarray:
    """Mask of the nodes that cover at least one cell of [0, d)."""
    _, first, _ = node_bounds(np.arange(2 ** (h + 1) - 1), h)
    return first < d


def build_tree(leaves: np.ndarray) -> np.ndarray:
    """Node values from the 2**h leaf values (last axis): each node sums its leaves."""
    leaves = np.asarray(leaves, dtype=np.float64)
    levels = [leaves]
    while levels[0].shape[-1] > 1:
        child = levels[0]
        levels.insert(0, child.reshape(*child.shape[:-1], -1, 2).sum(axis=-1))
    return np.concatenate(levels, axis=-1)


def pad(counts: np.ndarray, h: int) -> np.ndarray:
    """The d cell values followed by zeros up to 2**h leaves."""
    out = np.zeros(2**h, dtype=np.asarray(counts).dtype)
    out[: len(counts)] = counts
    return out


def node_frequencies(counts: np.ndarray, h: int) -> np.ndarray:
    """The true tree of a histogram: node frequencies over the users counted (zeros if none)."""
    total = float(np.sum(counts))
    tree = build_tree(pad(np.asarray(counts, dtype=np.float64), h))
    return tree / total if total > 0 else tree


@dataclass(frozen=True)
class TreeEstimate:
    """A tree estimated from one OUE round with population division over levels.

    ``freq`` are the node estimates (root exactly 1, padding exactly 0). ``variance`` is the
    OUE variance 4 e^eps / (m_l (e^eps - 1)^2) of a level-l node for its group of m_l users
    (0 for exact nodes, inf for a level nobody reported). ``variance_estimate`` is an unbiased
    estimate of each node estimate's full variance, used by :func:`dissimilarity`.
    ``observed`` marks the real nodes whose estimate enters the dissimilarity; ``groups`` are
    m_1 ... m_h.
    """

    freq: np.ndarray
    variance: np.ndarray
    variance_estimate: np.ndarray
    observed: np.ndarray
    groups: np.ndarray


def group_sizes(active: int, h: int) -> np.ndarray:
    """Near-equal sizes of the h level groups of ``active`` users (coarser levels first)."""
    return active // h + (np.arange(h) < active % h)


def estimate_tree(counts: np.ndarray, eps: float, h: int, rng: np.random.Generator) -> TreeEstimate:
    """Estimate the tree of the cell ``counts`` (users holding a value) with budget ``eps``.

    The users are split at random into h groups; group l reports its level-l node through OUE
    over the level's real nodes (papers/002 2.4; each user reports once, so the round costs
    ``eps``). A level with no reporter (fewer users than levels) takes its parent's estimate
    halved and is left out of the dissimilarity.

    The variance estimate: given its group, a node's estimate has variance A + B f_g with
    A = q(1-q) / (m (p-q)^2) (the paper's OUE variance), B = (p(1-p) - q(1-q)) / (m (p-q)^2),
    p = 1/2 and f_g the group's frequency; the group being a random m of the N users,
    Var(f_g) = C f (1-f) with C = (N-m) / (m (N-1)). So Var(f^) = A + B f + C f(1-f), and as
    E[f^ - f^2] = f(1-f) - Var(f^), the estimate (A + B f^ + C (f^ - f^2)) / (1 - C) has mean
    Var(f^) exactly. It needs C < 1: a level of one reporter among several users is not observed.
    """
    d = len(counts)
    counts = pad(np.asarray(counts, dtype=np.int64), h)
    active = int(counts.sum())
    size = 2 ** (h + 1) - 1
    freq = np.zeros(size)
    variance = np.zeros(size)
    estimate = np.zeros(size)
    observed = np.zeros(size, dtype=bool)
    groups = group_sizes(active, h)
    if active == 0:
        return TreeEstimate(freq, variance, estimate, observed, groups)
    freq[0], observed[0] = 1.0, True
    q = 1.0 / (np.exp(eps) + 1.0)
    gap = np.square(0.5 - q)
    remaining = counts
    for level in range(1, h + 1):
        m = int(groups[level - 1])
        width = 2 ** (h - level)
        start = 2**level - 1
        real = slice(start, start + -(-d // width))  # the level's real nodes
        if m == 0:
            parent = freq[level_slice(level - 1)]
            freq[real] = np.repeat(parent / 2.0, 2)[: real.stop - start]
            variance[real] = np.inf
            continue
        group = rng.multivariate_hypergeometric(remaining, m)
        remaining = remaining - group
        f = oue_frequencies(group.reshape(-1, width).sum(axis=1)[: real.stop - start], eps, rng)
        a = float(oue_variance(eps, m))
        b = (0.25 - q * (1.0 - q)) / (m * gap)
        c = (active - m) / (m * (active - 1)) if active > 1 else 0.0
        freq[real], variance[real] = f, a
        if c < 1.0:
            estimate[real] = (a + b * f + c * (f - f * f)) / (1.0 - c)
            observed[real] = True
    return TreeEstimate(freq, variance, estimate, observed, groups)


def dissimilarity(estimate: TreeEstimate, released: np.ndarray) -> float:
    """Unbiased estimate of the mean squared node difference between the true tree and
    ``released`` (papers/002 M1), over the observed nodes.

    E[(f^ - r)^2] = (f - r)^2 + Var(f^) for an unbiased f^ and a fixed r, so subtracting an
    unbiased estimate of Var(f^) leaves an unbiased estimate of (f - r)^2 node by node, and
    the mean over nodes stays unbiased. The estimate can be negative.
    """
    keep = estimate.observed
    gap = np.square(estimate.freq[keep] - released[keep]) - estimate.variance_estimate[keep]
    return float(np.mean(gap))


def minimum_cover(a: int, b: int, h: int) -> np.ndarray:
    """The fewest nodes whose intervals partition the leaves [a, b], ordered left to right."""
    if not 0 <= a <= b < 2**h:
        raise ValueError(f"need 0 <= a <= b < {2**h}, got a={a}, b={b}")
    left, right = [], []
    lo, hi = a + 2**h, b + 1 + 2**h  # 1-based heap numbers, half open [lo, hi) on one level
    while lo < hi:
        if lo & 1:  # a right child: its parent would reach left of the range
            left.append(lo)
            lo += 1
        if hi & 1:  # the node before hi is a left child: its parent would reach right of it
            hi -= 1
            right.append(hi)
        lo, hi = lo >> 1, hi >> 1
    return np.array(left + right[::-1], dtype=np.int64) - 1


def range_answer(tree: np.ndarray, a: int, b: int) -> np.ndarray:
    """Sum of the minimum cover of leaves [a, b] in ``tree`` (last axis: the nodes)."""
    tree = np.asarray(tree, dtype=np.float64)
    h = (tree.shape[-1] + 1).bit_length() - 2
    return tree[..., minimum_cover(a, b, h)].sum(axis=-1)


@dataclass(frozen=True)
class Partition:
    """Disjoint tree nodes covering every cell of [0, d) once, and how leaves share them.

    ``nodes`` are heap positions ordered left to right; ``labels[j]`` is the position in
    ``nodes`` of the interval holding leaf j (-1 for padding no interval holds); ``share[j]`` is
    the fraction of its interval's frequency that leaf j receives (0 in the padding).
    """

    nodes: np.ndarray
    labels: np.ndarray
    share: np.ndarray


def adaptive_partition(freq: np.ndarray, h: int, d: int, threshold: float) -> Partition:
    """Split nodes from the root down while their frequency in ``freq`` exceeds ``threshold``.

    Nodes wholly in the padding are dropped. Each leaf's share of its interval is its value in
    ``freq`` clipped at 0 over the interval's total, or an equal share of the interval's cells
    when that total is 0.
    """
    real = real_nodes(h, d)
    parts = []
    nodes = np.zeros(1, dtype=np.int64)
    for level in range(h + 1):
        nodes = nodes[real[nodes]]
        if level == h:
            parts.append(nodes)
            break
        split = freq[nodes] > threshold
        parts.append(nodes[~split])
        kids = nodes[split]
        nodes = np.stack([2 * kids + 1, 2 * kids + 2], axis=1).ravel()
    chosen = np.concatenate(parts)
    _, first, last = node_bounds(chosen, h)
    order = np.argsort(first)
    chosen, first, last = chosen[order], first[order], last[order]
    sizes = last - first + 1
    owner = np.repeat(np.arange(chosen.size), sizes)
    offset = np.arange(owner.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    labels = np.full(2**h, -1, dtype=np.int64)
    labels[first[owner] + offset] = owner
    held = labels >= 0
    lab = labels[held]
    cell = (np.arange(2**h) < d)[held].astype(np.float64)
    weight = np.clip(freq[level_slice(h)][held], 0.0, None) * cell
    total = np.bincount(lab, weights=weight, minlength=chosen.size)[lab]
    cells = np.bincount(lab, weights=cell, minlength=chosen.size)[lab]
    share = np.zeros(2**h)
    share[held] = np.where(total > 0, weight / np.where(total > 0, total, 1.0), cell / cells)
    return Partition(chosen, labels, share)


def variance_factors(partition: Partition, h: int) -> np.ndarray:
    """Per node, the variance of a tree published over ``partition`` in units of one interval
    estimate's variance (interval estimates are independent with equal variance).

    A node inside an interval gets that interval's estimate times its leaves' share s, so s^2;
    a node holding several intervals sums their estimates, so their number.
    """
    level, first, _ = node_bounds(np.arange(2 ** (h + 1) - 1), h)
    held = partition.labels >= 0
    interval_level = np.zeros(2**h, dtype=np.int64)
    interval_level[held] = node_bounds(partition.nodes, h)[0][partition.labels[held]]
    inside = interval_level[first] <= level
    starts = np.zeros(2**h)
    starts[node_bounds(partition.nodes, h)[1]] = 1.0
    return np.where(inside, np.square(build_tree(partition.share)), build_tree(starts))


def publish_tree(
    partition: Partition, counts: np.ndarray, eps: float, rng: np.random.Generator
) -> np.ndarray:
    """One OUE round with ``eps`` over the partition's intervals by the users in ``counts``;
    each leaf takes its share of its interval's estimate, every other node sums its leaves."""
    h = height(partition.share.size)
    held = partition.labels >= 0
    leaves = pad(np.asarray(counts, dtype=np.int64), h)
    interval_counts = np.bincount(
        partition.labels[held], weights=leaves[held], minlength=partition.nodes.size
    ).astype(np.int64)
    f = oue_frequencies(interval_counts, eps, rng)
    return build_tree(np.where(held, partition.share * f[partition.labels], 0.0))
