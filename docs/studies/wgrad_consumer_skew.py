#!/usr/bin/env python3
"""A model of the weight gradients' two consumer warpgroups with and without a lead (docs/wip/wgrad-consumer-skew.patch).

Each tile is K ring stages; a warpgroup's k-step takes T us of tensor time (both warpgroups issuing share the tensor
cores: each then progresses at half rate); after its last k-step a warpgroup runs its epilogue for E us (no
tensor work, no contention between the two); stage s of the ring can be reloaded only once both warpgroups have
given it back, and its load takes L us; the ring has S stages. The second warpgroup starts its first k-step once
the first has issued `lead` of them. Event-driven in small time steps: prints the time per tile in steady state and
the tensor cores' busy share, for leads 0-3.
"""
import sys


def simulate(K=16, S=4, T=0.7, E=3.5, L=1.0, lead=0, tiles=60, dt=0.005):
    # per warpgroup: current global stage index g (0..), progress within the stage (0..1), phase ('mma'/'epi'),
    # epilogue time left
    done = [[None] * (K * tiles) for _ in range(2)]  # time each warpgroup finished stage g
    ready = [0.0] * (K * tiles)  # time stage g's data is loaded
    g = [0, 0]
    prog = [0.0, 0.0]
    epi = [0.0, 0.0]
    started = [True, lead == 0]
    t = 0.0
    busy = 0.0
    tile_end = []
    while min(g) < K * tiles and t < 1e5:
        # loads: stage g's data is ready L after both gave back stage g - S (the first S at time L)
        def data_ready(x):
            if x < S:
                return L
            a, b = done[0][x - S], done[1][x - S]
            if a is None or b is None:
                return None
            return max(a, b) + L
        active = []
        for w in range(2):
            if g[w] >= K * tiles or not started[w]:
                continue
            if epi[w] > 0:
                continue
            r = data_ready(g[w])
            if r is not None and r <= t:
                active.append(w)
        if active:
            busy += dt
        rate = 1.0 / len(active) if active else 0.0
        for w in range(2):
            if epi[w] > 0:
                epi[w] -= dt
                continue
            if w in active:
                prog[w] += dt * rate / T
                if prog[w] >= 1.0:
                    prog[w] = 0.0
                    done[w][g[w]] = t
                    g[w] += 1
                    if w == 0 and not started[1] and g[0] >= lead:
                        started[1] = True
                    if g[w] % K == 0:
                        epi[w] = E
                        if w == 1:
                            tile_end.append(t)
        t += dt
    n = len(tile_end)
    per_tile = (tile_end[-1] - tile_end[n // 2]) / (n - 1 - n // 2)
    return per_tile, busy / t


def main():
    E = float(sys.argv[1]) if len(sys.argv) > 1 else 3.5
    L = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    base = 16 * 0.7 * 2
    print(f"K = 16 stages a tile, T = 0.7 us a warpgroup's k-step alone, E = {E} us epilogue, L = {L} us load, "
          f"S = 4: the tile's tensor time {base:.1f} us")
    for lead in range(4):
        per, b = simulate(E=E, L=L, lead=lead)
        print(f"lead {lead}: {per:.2f} us a tile ({base / per:.2f} of the tensor time), tensor cores busy {b:.2f}")


if __name__ == "__main__":
    main()
