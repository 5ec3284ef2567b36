"""How the weight gradients' tile schedule fares under skewed routing (twenty-first session, 2026-12-04e).

Routing: T tokens, k distinct experts each of E, drawn with popularity 1 / rank^s (Zipf; s = 0 uniform), the ranks
dealt to random expert ids. A K-grouped tile (128 x 256 of an expert's M x N gradient) costs its expert's k-steps
(rows / 64, rounded up) plus a fixed 2 (the epilogue, the pipeline's fill). Prints the makespan over G blocks
divided by the ideal (total cost / G) for the static round robin (block b takes tiles b, b + G, ...), the run-time
schedule (the next tile to the first free block, tiles in expert order) and the run-time schedule over the experts
busiest first (LPT), and the 2-CTA cluster form's static walk over pairs of tiles, busiest first. Measured at s = 1.0 (docs/RESULTS.md 2026-12-04e, calls 4-5): static dW2 +16%, dW1 +10% over
uniform routing; run-time dW2 +9%, dW1 -1%.
"""
import heapq

import numpy as np

T, K, E, G = 16384, 8, 128, 132


def route(rng, s):
    p = 1.0 / np.arange(1, E + 1) ** s
    p /= p.sum()
    g = np.log(p)[None, :] + rng.gumbel(size=(T, E))  # k distinct draws: the Gumbel top-k trick
    ids = np.argpartition(-g, K, axis=1)[:, :K]
    return np.bincount(ids.ravel(), minlength=E)[rng.permutation(E)]


def tiles(rows, m, n, order, over=2.0):
    per = -(-m // 128) * -(-n // 256)
    return [(-(-rows[e] // 64)) + over for e in order for _ in range(per)]


def static(costs, g=G):
    load = np.zeros(g)
    for i, c in enumerate(costs):
        load[i % g] += c
    return load.max()


def dynamic(costs):
    h = [(0.0, j) for j in range(G)]
    for c in costs:
        t, j = heapq.heappop(h)
        heapq.heappush(h, (t + c, j))
    return max(t for t, _ in h)


def main():
    rng = np.random.default_rng(1)
    for s in [0.0, 0.5, 1.0]:
        rows = route(rng, s)
        out = []
        for name, m, n in [("dW2", 2048, 768), ("dW1", 1536, 2048)]:
            nat = tiles(rows, m, n, range(E))
            lpt = tiles(rows, m, n, sorted(range(E), key=lambda e: -rows[e]))
            ideal = sum(nat) / G
            # 2-CTA clusters (landed as `MEGAMOE_WGRAD_SCHED=clusters`, 2026-12-04g): G / 2 pairs walk the pair units (half the tiles, the
            # same cost each) statically, busiest expert first
            pairs = lpt[::2]
            out.append(f"{name} static {static(nat) / ideal:.3f} run-time {dynamic(nat) / ideal:.3f} "
                       f"busiest-first {dynamic(lpt) / ideal:.3f} clusters {static(pairs, G // 2) / ideal:.3f}")
        print(f"s = {s}: busiest / mean rows {rows.max() / rows.mean():.1f}; " + "; ".join(out))


if __name__ == "__main__":
    main()
