"""benchmarks/relation_judge.py (issue 27, fifth round): its generated pairs are
apart from suite i and labelled right, and its AUC and fit are what they claim."""

from __future__ import annotations

import importlib
import random
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
rj = importlib.import_module("relation_judge")


def _relation_of(statement: str) -> set[str]:
    """The generated relations whose wordings can produce ``statement`` (any name, any value)."""
    out = set()
    for rel, (templates, values) in rj.REL.items():
        for t in templates:
            for name in rj.NAMES:
                for v in values:
                    s = t.format(s=name, v=v)
                    if s[0].upper() + s[1:] == statement:
                        out.add(rel)
    return out


def test_pairs_are_deterministic_and_labelled_by_relation() -> None:
    rels = sorted(rj.REL)
    a, b = rj.pairs(rels, 300, 5), rj.pairs(rels, 300, 5)
    assert a == b and a != rj.pairs(rels, 300, 6)
    chatter = {c.format(s=n) for c in rj.CHATTER for n in rj.NAMES}
    labels = {0: 0, 1: 0}
    for x, y, label in a[:80]:
        labels[label] += 1
        rx = _relation_of(x)
        assert rx, x  # the first statement is always a relation's
        if label == 1:
            assert rx & _relation_of(y) and x != y  # the same relation, another value
        elif y not in chatter:
            assert not rx & _relation_of(y)  # another relation
        # one subject per pair
        assert [n for n in rj.NAMES if n in x] == [n for n in rj.NAMES if n in y]
    assert labels[0] and labels[1]


def test_generated_relations_and_names_are_not_suite_is() -> None:
    from tierstore.bench import relations_workload as suite_i

    assert not set(rj.REL) & (set(suite_i.MULTI) | set(suite_i.SINGLE))
    people = set(suite_i.NAMES) | set(suite_i.SISTERS) | set(suite_i.BROTHERS)
    assert not set(rj.NAMES) & people
    assert not {v for _, values in rj.REL.values() for v in values} & people


def test_roc_auc_is_the_share_of_positive_negative_pairs_ordered_right() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        score = rng.permutation(60).astype(float)  # no ties
        y = (rng.random(60) < 0.4).astype(float)
        if y.min() == y.max():
            continue
        pos, neg = score[y == 1], score[y == 0]
        brute = np.mean([p > n for p in pos for n in neg])
        assert rj.roc_auc(score, y) == pytest.approx(brute)


def test_fit_logistic_learns_a_separable_rule() -> None:
    rng = random.Random(1)
    X = np.array([[rng.uniform(-1, 1), rng.uniform(-1, 1)] for _ in range(400)])
    y = (X[:, 0] - 0.5 * X[:, 1] > 0.1).astype(float)
    w, b = rj.fit_logistic((X - X.mean(0)) / X.std(0), y)
    pred = ((X - X.mean(0)) / X.std(0) @ w + b) > 0
    assert (pred == (y == 1)).mean() > 0.97
