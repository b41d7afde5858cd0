"""The parts' equations by hand in float64, row by row and token by token, for the checks of composed
runs (tests/test_composition.py): the rows of one contrastive softmax (SimCSE's InfoNCE, MixCSE's
mixed negatives in either form, AdCSE's adversaries), their mean cross-entropy and the adversaries'
gradient, and SARCSE's Z and self-adaptive reconstruction loss of one view."""

from collections import Counter

import torch


def unit(x):
    return x / x.norm()


def cos(a, b):
    return torch.dot(unit(a), unit(b))


def softmax_rows(anchors, positives, tau, mixcse=None, mix_lambda=0.0, adversaries=(), stop_gradient=True):
    """The rows of the contrastive softmax, each ``(logits, label, anchor)``: its scores over tau, the
    column of its positive, and the embedding it is anchored at.

    ``mixcse`` None: InfoNCE (SimCSE's Eq. 1), row i anchored at h_i, candidates h_k+, label i.
    ``"paper"``: MixCSE's L_mix with both anchors (2N rows), h unit vectors: h_i against h'_k and
    SG(h~'_i), h~'_i = unit(lambda h'_i + (1 - lambda) h'_{i+1}); then h'_i against h_k and SG(h~_i),
    mixed from h the same way. ``"released"``: the authors' code (N rows, cse/losses/mixcse.py), on
    the raw vectors z1 = h, z2 = h': [cos(z1_i, z2_k)], [cos(z1_i, SG(m_k))] with 0 at k = i - 1,
    [cos(SG(w_i), z2_k)] with 0 at k = i + 1, m_k = lambda z2_k + (1 - lambda) z2_{k+1} and w_i the
    same of z1. The next row, cyclically, is each sentence's random in-batch negative.

    Every row then gets AdCSE's columns cos(row's anchor, n_j) for the ``adversaries`` n_j (Eq. 5)."""
    n, lam = len(anchors), mix_lambda
    sg = (lambda x: x.detach()) if stop_gradient else (lambda x: x)  # noqa: E731
    following = lambda i: (i + 1) % n  # noqa: E731
    rows = []
    if mixcse == "paper":
        h, h_prime = [unit(x) for x in anchors], [unit(x) for x in positives]
        for a, b in ((h, h_prime), (h_prime, h)):
            for i in range(n):
                mixed = sg(unit(lam * b[i] + (1 - lam) * b[following(i)]))
                rows.append(([torch.dot(a[i], b[k]) for k in range(n)] + [torch.dot(a[i], mixed)], i, a[i]))
    elif mixcse == "released":
        z1, z2, zero = anchors, positives, anchors.new_zeros(())
        m = [sg(lam * z2[k] + (1 - lam) * z2[following(k)]) for k in range(n)]
        for i in range(n):
            w = sg(lam * z1[i] + (1 - lam) * z1[following(i)])
            scores = [cos(z1[i], z2[k]) for k in range(n)]
            scores += [zero if k == (i - 1) % n else cos(z1[i], m[k]) for k in range(n)]
            scores += [zero if k == following(i) else cos(w, z2[k]) for k in range(n)]
            rows.append((scores, i, z1[i]))
    else:
        rows = [([cos(anchors[i], positives[k]) for k in range(n)], i, anchors[i]) for i in range(n)]
    return [
        (torch.stack(scores + [cos(anchor, a) for a in adversaries]) / tau, label, anchor)
        for scores, label, anchor in rows
    ]


def mean_cross_entropy(rows):
    """The mean over the rows of -log softmax(logits)[label]."""
    return sum(torch.logsumexp(logits, 0) - logits[label] for logits, label, _ in rows) / len(rows)


def adversary_gradient(rows, adversaries, tau):
    """dL/dn_j of :func:`mean_cross_entropy` over ``rows`` (built at temperature ``tau``) whose last
    M columns are cos(anchor, n_j) / tau: each row adds its softmax weight p_j of the column times
    d cos(a, n_j) / dn_j = (unit(a) - cos(a, n_j) unit(n_j)) / ||n_j||, over tau."""
    m, grad = len(adversaries), torch.zeros_like(adversaries)
    for logits, _, anchor in rows:
        weights = logits.softmax(0)[-m:]
        for j, n_j in enumerate(adversaries):
            grad[j] += weights[j] / tau * (unit(anchor) - cos(anchor, n_j) * unit(n_j)) / n_j.norm()
    return grad / len(rows)


def token_weights(sentences, special, theta, freq_lambda):
    """f(w) = max(theta, 1 - lambda freq(w)) (SARCSE's Eq. 8), freq(w) w's count over the count of all
    tokens of ``sentences`` (token-id lists), the ``special`` ids not counted."""
    counts = Counter(t for ids in sentences for t in ids if t not in special)
    total = sum(counts.values())
    return lambda w: max(theta, 1.0 - freq_lambda * counts[w] / total)


def sarcse_view(backbone, autoencoder, ids, mask, special, weight):
    """Z and L_R of one view (SARCSE's Eqs. 4 and 9), sentence by sentence: the states x_1..x_N of its
    N real tokens (the ``special`` ids and padding dropped) go alone through the autoencoder, which
    gives Z and x'_1..x'_N, and L_R = (1/N) sum_i f(w_i) MSE(x_i, x'_i), the MSE a mean over the d
    dimensions, f = ``weight``. Returns Z (sentences, size) and the sentences' mean L_R."""
    states = backbone(input_ids=ids, attention_mask=mask).last_hidden_state
    codes, losses = [], []
    for i in range(len(ids)):
        real = [j for j in range(ids.shape[1]) if mask[i, j] and int(ids[i, j]) not in special]
        x = states[i, real]
        out = autoencoder(x[None], torch.ones(1, len(real), dtype=torch.bool))
        codes.append(out.embedding[0])
        errors = ((x - out.reconstruction[0]) ** 2).mean(-1)
        losses.append(sum(weight(int(ids[i, j])) * e for j, e in zip(real, errors)) / len(real))
    return torch.stack(codes), sum(losses) / len(losses)
