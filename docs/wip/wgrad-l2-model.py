# crude model: 132 SMs (66 2-CTA clusters) take wgrad tile pairs from a counter (busiest expert first); each pair
# steps through its expert's k-steps (64 rows) one per time unit, reading A chunks (2 x 128 cols) and B (256 cols,
# multicast once). LRU cache of 8 KiB chunks (64 rows x 64 cols bf16). Counts DRAM chunk reads.
import random, sys
from collections import OrderedDict
def run(T, H, I, E=128, k=8, which="dW1", l2_mb=40, seed=1, sms=132, order="m"):
    rnd = random.Random(seed)
    rows = [0]*E
    for _ in range(T):
        for e in rnd.sample(range(E), k): rows[e] += 1
    if which == "dW1": M, N = 2*I, H
    else: M, N = H, I
    mt, nt = M//128, N//256
    experts = sorted(range(E), key=lambda e: -rows[e])
    tiles = []
    for e in experts:
        if order == "m":
            for m2 in range(0, mt, 2):
                for n in range(nt): tiles.append((e, m2, n))
        else:
            for n in range(nt):
                for m2 in range(0, mt, 2): tiles.append((e, m2, n))
    cap = int(l2_mb*2**20 // 8192)
    cache = OrderedDict(); miss = 0; ref = 0
    def touch(key):
        nonlocal miss, ref
        ref += 1
        if key in cache: cache.move_to_end(key)
        else:
            miss += 1; cache[key] = 1
            if len(cache) > cap: cache.popitem(last=False)
    # event sim: each cluster has (tile, kstep); all clusters advance one k-step per unit (round robin order)
    nxt = 0; slots = []
    for c in range(sms//2):
        if nxt < len(tiles): slots.append([tiles[nxt], 0]); nxt += 1
    while slots:
        rnd.shuffle(slots)
        for s in slots:
            (e, m2, n), ks = s
            if ks*64 < rows[e]:
                for col in range(m2*2, m2*2+4): touch(("A", e, ks, col))   # 2 m-tiles x 128 cols = 4 chunks of 64
                for col in range(n*4, n*4+4): touch(("B", e, ks, col))
            s[1] += 1
        new = []
        for s in slots:
            (e, m2, n), ks = s
            if ks*64 >= rows[e]:
                if nxt < len(tiles): new.append([tiles[nxt], 0]); nxt += 1
            else: new.append(s)
        slots = new
    minimal = sum((M//64 + N//64) * ((rows[e]+63)//64) for e in range(E))
    return miss, ref, minimal
for (name, T, H, I) in [("7B n=256", 16384, 1536, 256), ("30B", 16384, 2048, 768), ("1.4B", 40960, 768, 256), ("30B n=512", 32768, 4096, 512)]:
    for which in ["dW1", "dW2"]:
        for l2 in [25, 40]:
          for order in ["m", "n"]:
            miss, ref, mn = run(T, H, I, which=which, l2_mb=l2, order=order)
            print(f"{name:10} {which} L2 {l2} MB order {order}: DRAM/minimal {miss/mn:.2f}  L2 refs/minimal {ref/mn:.2f}", flush=True)
